"""Checks of a reader's refusals for tests, shared by the tests of several readers."""
import json
from pathlib import Path

import pytest

from timm_vit_variants import SimpleVisionTransformer
from timm_vit_variants.checkpoints import open_checkpoint
from timm_vit_variants.errors import ViTVariantsError


def assert_register_count_refused(folder: Path, claimed: int = 2) -> None:
    """A transformers folder whose config.json claims ``claimed`` registers where its weights hold another count is
    refused with one error line naming the weight file and ``embeddings.register_tokens``."""
    config = json.loads((folder / 'config.json').read_text())
    config['num_register_tokens'] = claimed
    (folder / 'config.json').write_text(json.dumps(config))
    with pytest.raises(ViTVariantsError) as e:
        open_checkpoint(folder, layout=SimpleVisionTransformer.state_layout)
    assert e.value.key == 'embeddings.register_tokens' and str(folder / 'model.safetensors') in str(e.value)
    assert len(str(e.value).splitlines()) == 1
