"""The porting side's family registry: a family is its own module, found without editing any other file."""
import subprocess
import sys
import textwrap
from pathlib import Path

from porting.families.registry import FAMILIES, FORMATS, NEEDS, REFERENCES, RESAMPLE_RULES

REPO = Path(__file__).resolve().parents[1]


def test_every_format_has_one_family_and_a_reference():
    claimed = [fmt for family in FAMILIES for fmt in family.references]
    assert len(claimed) == len(set(claimed)) == len(FORMATS)
    assert set(NEEDS) <= set(REFERENCES)
    from timm_vit_variants.checkpoints import FORMATS as READ_FORMATS
    assert set(FORMATS) == set(READ_FORMATS)  # every format a reader gives has its reference, and no other


def test_a_new_family_module_reaches_the_cli_and_the_references(tmp_path):
    """A module in the families package (here a temporary folder on its path) adds its format to ``--from``'s
    choices, ``REFERENCES`` and the needs check, with no other file edited; the reference imports lazily."""
    (tmp_path / 'zz_probe.py').write_text(textwrap.dedent('''
        from porting.families.registry import Needs, PortingFamily, lazy
        FAMILY = PortingFamily('zz_probe', references={'zzfmt': lazy('json', 'dumps')},
                               needs={'zzfmt': Needs('clip', 'verifying a probe')}, resample_rules=('zzrule',))
    '''))
    code = textwrap.dedent(f'''
        import sys
        import porting.families
        porting.families.__path__.append({str(tmp_path)!r})
        from porting.commands.options import FORMATS, RESAMPLE_RULES
        from porting.families.registry import REFERENCES, NEEDS
        assert 'zzfmt' in FORMATS and 'zzrule' in RESAMPLE_RULES, FORMATS
        assert REFERENCES['zzfmt']([1]) == '[1]' and NEEDS['zzfmt'].extra == 'clip'
        heavy = sorted(m for m in ('torch', 'timm') if m in sys.modules)
        print('ok', heavy)
    ''')
    proc = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == 'ok []'


def test_resample_rules_are_the_geometry_rules():
    from timm_vit_variants.geometry import RESAMPLE_RULES as GEOMETRY_RULES
    assert set(RESAMPLE_RULES) == set(GEOMETRY_RULES)


def test_claims_run_before_the_formats_own_reference_by_order():
    """A family's claim on another family's format runs its reference for the sources its test accepts (the lowest
    order first); every other source runs the format's own reference."""
    import pytest

    from porting.families.registry import Claim, PortingFamily, _references

    plain = PortingFamily('plain', references={'fmt': lambda check, x: ('plain', check)})
    late = PortingFamily('late', claims=(Claim('fmt', 20, lambda check: check > 0, lambda check, x: ('late', check)),))
    early = PortingFamily('early', claims=(Claim('fmt', 10, lambda check: check > 5,
                                                 lambda check, x: ('early', check)),))
    run = _references((late, plain, early))['fmt']
    assert [run(check, None)[0] for check in (-1, 3, 9)] == ['plain', 'late', 'early']
    with pytest.raises(RuntimeError, match="claim sources of formats no family defines: \\['other'\\]"):
        _references((plain, PortingFamily('stray', claims=(Claim('other', 1, bool, bool),))))


def test_table_rules_are_resample_rules():
    from porting.families.registry import TABLE_RULES
    assert set(TABLE_RULES) <= set(RESAMPLE_RULES)
