"""The one request factory (the CLI's parsed arguments and the API's keywords give the same request), the refusals it
words once, the error helpers, and the typed check: ``Check``, ``deltas`` and the reference registry."""
import dataclasses
import sys

import pytest
import torch

from porting.cli import build_parser
from porting.commands.options import request_from_args
from porting.families.registry import FORMATS
from porting.request import ConvertRequest, ExportRequest, build_request
from porting.verification import REFERENCES, Check, Outputs, deltas
from porting.verification.compare import OutputsDiffer
from timm_vit_variants import SimpleViTConfig
from timm_vit_variants.errors import UnknownOptionError, ViTVariantsError, first_line, reraised_as


def _parsed(argv):
    return request_from_args(argv[0] if argv[0] == 'export' else 'convert', build_parser().parse_args(argv))


def test_the_command_line_and_the_keywords_build_one_request(monkeypatch):
    monkeypatch.setattr(sys.stderr, 'isatty', lambda: False)
    cli = _parsed(['convert', 'src.npz', 'out', '--from', 'bigvision', '--source-img-size', '32', '--img-size', '48',
                   '40', '--dataset', 'a', '--dataset', 'b', '--limit', 'depth=8', '--no-ema', '--crop-pct', '0.9',
                   '--mean', '0.5', '--tol', '1e-3', '--no-verify'])
    api = build_request(ConvertRequest, from_='bigvision', source_img_size=32, img_size=(48, 40), dataset=['a', 'b'],
                        limit='depth=8', no_ema=True, crop_pct=0.9, mean=0.5, tol=1e-3, no_verify=True,
                        max_shard_size=cli.output.max_shard_size)
    assert cli == api
    assert (api.source.use_ema, api.verify, api.limits.depth, api.output.datasets) == (False, False, 8, ('a', 'b'))
    assert api.source.source_img_size == (32,) and api.target.img_size == (48, 40) and api.source.mean == (0.5,)
    export = _parsed(['export', 'folder', 'm.onnx', '--static', '64', '--opset', '20'])
    assert export == build_request(ExportRequest, static=64, opset=20)


@pytest.mark.parametrize('kind, flags, key', [(ExportRequest, dict(opset=17), 'opset'),
                                              (ConvertRequest, dict(crop_pct=1.5), 'crop_pct'),
                                              (ConvertRequest, dict(crop_pct=0), 'crop_pct')])
def test_a_value_no_option_takes_is_refused_naming_it(kind, flags, key):
    with pytest.raises(ViTVariantsError) as caught:
        build_request(kind, **flags)
    assert caught.value.key == key


def test_an_unknown_keyword_is_a_vit_variants_error_and_a_type_error():
    with pytest.raises(UnknownOptionError, match=r"unknown export option\(s\) \['limits'\]") as caught:
        build_request(ExportRequest, limits=None)
    assert isinstance(caught.value, TypeError) and isinstance(caught.value, ViTVariantsError)


def test_first_line_and_reraised_as():
    error = RuntimeError('the first line.\n  and a long\ntraceback-like tail')
    assert first_line(error) == 'RuntimeError: the first line.'
    assert first_line(error, typed=False) == 'the first line'
    assert first_line(KeyError()) == 'KeyError' and first_line(OSError(), typed=False) == 'OSError'
    with pytest.raises(ViTVariantsError, match='wrapped: RuntimeError') as caught:
        with reraised_as(lambda e: ViTVariantsError(f'wrapped: {first_line(e)}')):
            raise error
    assert caught.value.__suppress_context__
    own = ViTVariantsError('ours', key='k')
    with pytest.raises(ViTVariantsError) as caught:
        with reraised_as(lambda e: ViTVariantsError('wrapped')):
            raise own
    assert caught.value is own  # a ViTVariantsError passes as it is
    with pytest.raises(LookupError):  # one of ``keep`` too
        with reraised_as(lambda e: ViTVariantsError('wrapped'), keep=(LookupError,)):
            raise KeyError('x')


def test_deltas_measure_every_output_both_sides_have():
    tokens, logits = torch.zeros(1, 4, 8), torch.zeros(1, 3)
    reference = Outputs(tokens, logits, 'reference', pre_logits=torch.zeros(1, 8))
    ours = Outputs(tokens + 0.25, logits - 0.5, 'ours')  # no pre-logits: not measured
    assert deltas(reference, ours) == {'features': 0.25, 'logits': 0.5}
    with pytest.raises(OutputsDiffer) as caught:
        deltas(reference, Outputs(tokens, torch.zeros(1, 4), 'ours'))
    assert (caught.value.name, caught.value.reference, caught.value.ours) == ('logits', (1, 3), (1, 4))
    assert caught.value.found == {'features': 0.0}
    nan = deltas(reference, Outputs(tokens, torch.full((1, 3), float('nan')), 'ours'))['logits']
    assert not nan <= 1.0  # a NaN output fails every bound


def test_the_check_is_typed_and_every_format_has_a_reference():
    source = SimpleViTConfig.of(img_size=32, patch_size=4, embed_dim=32, depth=2, num_heads=2)
    check = Check('x.npz', 'bigvision', source, source.replace(img_size=48), 'bigvision')
    assert check.runs_at.img_size == (48, 48) and Check('x.npz', 'bigvision', source).runs_at is source
    with pytest.raises(dataclasses.FrozenInstanceError):
        check.rule = 'timm'
    assert set(REFERENCES) == set(FORMATS)
