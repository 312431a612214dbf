"""Every command in README.md and docs/*.md runs as written, in order, on the test fixtures.

Each document's fenced ``bash`` and ``python`` blocks are extracted and run in order, in a fresh working folder,
by ``docs_runner.py`` in one interpreter per document (``vit-port`` lines through ``porting.cli.main``, the function
the console script calls). Nothing reaches the network:

* the published checkpoints the documents name (``DOWNLOADS``) are small fixtures with the same file names, put in
  timm's download cache (where a URL source is looked for first) and copied for a ``curl -LO`` line;
* Hub ids go to a loopback Hub (``tests/hub_server.FakeHub``) through ``HF_ENDPOINT``, holding the repos of
  ``HUB_REPOS``; pushes land there, under the token's namespace ``your-name``;
* the working folder links the checkout's ``tests/`` and ``examples/``, so repository paths resolve.

A command is skipped only by a rule of ``SKIPS`` (installs, this suite itself, training runs, timm's repository
scripts and other long jobs), each with its reason; a command no rule knows fails the test, so a new command in
the documents is either run here or given a reason.
"""
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from porting.sources import url_cache_path

from hub_server import EMPTY_AGENT_REGISTRY, FakeHub

REPO = Path(__file__).resolve().parents[1]
REF = REPO / 'tests' / 'data' / 'reference'
DOCUMENTS = ['README.md', *sorted(p.relative_to(REPO).as_posix() for p in (REPO / 'docs').glob('*.md'))]
TOKEN = 'hf_' + 'DocsCommandsLoopback' * 2
USER = 'your-name'

# The published files the documents name -> the fixture standing in for each (same format, width 32).
DOWNLOADS = {
    'vit_s16_i1k_300ep.npz': REF / 'bigvision_sincos_gap.npz',       # big_vision ViT-S/16 (sin-cos, gap, pre-logits)
    'flexivit_s_i1k.npz': REF / 'flexivit_tiny.npz',                 # FlexiViT-S (32x32 kernel, 7x7 table)
    'Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.03-res_384.npz':
        REF / 'vitjax_tiny.npz',                                     # AugReg Ti/16 (vit_jax layout, learned table)
    'webli_en_so400m_384_58765454.npz': REF / 'siglip_tiny384.npz',  # SigLIP So400m/14 at 384 (two towers, MAP head)
    'siglip2_so400m16_naflex.npz': REF / 'naflex_tiny.npz',         # SigLIP 2 NaFlex So400m/16 (Dense kernel, G x G table)
}
# Hub repos the documents read -> the checkpoint_fixtures writer of what the loopback Hub holds there.
HUB_REPOS = {'google/vit-base-patch16-224': 'write_hf_folder',  # a transformers ViT folder
             'timm/naflexvit_so400m_patch16_siglip.v2_webli': 'write_timm_naflex_folder'}  # timm NaFlexVit

# (pattern on the command or block, reason). The first match wins.
SKIPS = [
    (r'^(python3 -m venv|\. \.venv/bin/activate|source |pip install)', 'installs the environment this suite runs in'),
    (r'(^|\s)-m pytest', 'is this test suite (or a part of it)'),
    (r'^python examples/quickstart\.py', 'the training demo trains for minutes; tests/test_train_quickstart.py runs it'),
    (r'benchmarks/(bench_|timm_zoo\.py)', 'benchmarks run for minutes; their figures and conditions are in '
                                        'docs/benchmarks.md'),
    (r'^(PYTHONPATH=\S* python -c|python train\.py|torchrun|vit-variants-run|vit-variants-train-ddp|'
     r'python -m timm_vit_variants\.training|python pytorch-image-models/)',
     "needs a dataset (DATA) or pytorch-image-models' scripts, which the suite replays in tests/test_train_*.py and "
     'tests/test_deploy_timm_scripts.py'),
    (r"'simple_vit_small_patch16_224\.bv_i1k_300ep', pretrained=True",
     'timm downloads ViT-S/16 and FlexiViT-B itself here; the stand-in fixtures have other shapes'),
    (r"pretrained_cfg_overlay=dict\(file='vit_s16_i1k_300ep\.npz'\)",
     'builds the full-size ViT-S/16, whose shapes the stand-in fixture does not have'),
    (r'my_train_set', 'needs a training data set'),
]


def blocks(text):
    """(language, first line number, body) of every fenced block."""
    for m in re.finditer(r'^```(\w*)\n(.*?)^```', text, re.S | re.M):
        yield m.group(1), text[:m.start()].count('\n') + 2, m.group(2)


def shell_commands(body):
    """The commands of a shell block: continuations joined, comments dropped, ``&&`` chains split."""
    joined = re.sub(r'\\\n\s*', ' ', body)
    for line in joined.splitlines():
        words = shlex.split(line, comments=True)
        if not words:
            continue
        command = []
        for word in words + ['&&']:
            if word == '&&':
                if command:
                    yield command
                command = []
            else:
                command.append(word)


def skip_reason(text):
    return next((reason for pattern, reason in SKIPS if re.search(pattern, text)), None)


def plan_for(document):
    """The steps of one document, and the skipped ones with their reasons."""
    steps, skipped, variables = [], [], {}
    text = (REPO / document).read_text()
    for language, line, body in blocks(text):
        where = f'{document}:{line}'
        if language == 'python':
            reason = skip_reason(body)
            if reason:
                skipped.append((where, body.strip().splitlines()[0], reason))
            else:
                steps.append({'kind': 'python', 'code': body, 'where': where})
            continue
        if language not in ('bash', 'sh', 'shell'):
            continue
        for words in shell_commands(body):
            words = [re.sub(r'\$(\w+)', lambda m: variables.get(m.group(1), m.group(0)), w) for w in words]
            command = ' '.join(words)
            if len(words) == 1 and re.fullmatch(r'[A-Z_]+=.*', words[0]):
                name, value = words[0].split('=', 1)
                variables[name] = value
                continue
            reason = skip_reason(command)
            if reason:
                skipped.append((where, command, reason))
            elif words[0] == 'vit-port':
                steps.append({'kind': 'cli', 'argv': words[1:], 'where': f'{where}: {command}'})
            elif words[:3] == ['python', '-m', 'porting']:
                steps.append({'kind': 'cli', 'argv': words[3:], 'where': f'{where}: {command}'})
            elif words[0] == 'python' and words[1].startswith('examples/'):
                steps.append({'kind': 'script', 'argv': words[1:], 'where': f'{where}: {command}'})
            elif words[:2] == ['curl', '-LO'] and words[2].rsplit('/', 1)[-1] in DOWNLOADS:
                name = words[2].rsplit('/', 1)[-1]
                steps.append({'kind': 'copy', 'fixture': str(DOWNLOADS[name]), 'name': name,
                              'where': f'{where}: {command}'})
            else:
                pytest.fail(f'{where}: no rule runs or skips {command!r}; run it here or give SKIPS a reason')
    return steps, skipped


@pytest.fixture(scope='module')
def hub(tmp_path_factory):
    import checkpoint_fixtures as F
    root = tmp_path_factory.mktemp('hub-repos')
    with FakeHub(token=TOKEN, user=USER, max_lifetime=900) as server:
        for repo_id, writer in HUB_REPOS.items():
            folder = getattr(F, writer)(root / repo_id.replace('/', '--'))
            server.add_repo(repo_id, {p.name: p.read_bytes() for p in folder.iterdir()})
        yield server


@pytest.fixture(scope='module')
def download_cache(tmp_path_factory):
    """timm's download cache ($TORCH_HOME/hub/checkpoints) holding the stand-ins under the published names."""
    home = tmp_path_factory.mktemp('torch-home')
    checkpoints = home / 'hub' / 'checkpoints'
    checkpoints.mkdir(parents=True)
    for name, fixture in DOWNLOADS.items():  # where timm itself keeps a tag's file
        (checkpoints / name).write_bytes(fixture.read_bytes())
    for url in _published_urls():  # a URL source's entry is keyed by the whole URL
        (checkpoints / url_cache_path(url).name).write_bytes(DOWNLOADS[url.rsplit('/', 1)[-1]].read_bytes())
    return home


def _published_urls():
    """Every URL of a ``DOWNLOADS`` file that the documents name."""
    found = set()
    for document in DOCUMENTS:
        for url in re.findall(r'https://[^\s\'"`)]+', (REPO / document).read_text(encoding='utf-8')):
            if url.rsplit('/', 1)[-1] in DOWNLOADS:
                found.add(url)
    return sorted(found)


@pytest.mark.parametrize('document', DOCUMENTS)
def test_document_commands_run(document, hub, download_cache, tmp_path):
    steps, skipped = plan_for(document)
    work = tmp_path / 'work'
    work.mkdir()
    for name in ('tests', 'examples', 'configs'):
        (work / name).symlink_to(REPO / name)
    hf_home = tmp_path / 'hf-home'
    hf_home.mkdir()
    (hf_home / '.agent_harnesses.json').write_text(json.dumps(EMPTY_AGENT_REGISTRY))
    plan, results = tmp_path / 'plan.json', tmp_path / 'results.json'
    plan.write_text(json.dumps({'steps': steps}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(('HF_', 'HUGGING'))}
    env.update(PYTHONPATH=os.pathsep.join([str(REPO), env.get('PYTHONPATH', '')]).rstrip(os.pathsep),
               HF_ENDPOINT=hub.url, HF_TOKEN=TOKEN, HF_HOME=str(hf_home), TORCH_HOME=str(download_cache),
               OMP_NUM_THREADS='2', MPLBACKEND='Agg')
    proc = subprocess.run([sys.executable, str(REPO / 'tests' / 'docs_runner.py'), str(plan), str(results)],
                          cwd=work, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ran = json.loads(results.read_text())
    failed = [r for r in ran if r['code'] != 0]
    assert not failed, f"{failed[0]['where']} exited {failed[0]['code']}:\n{failed[0]['output']}"
    assert len(ran) == len(steps)
    print(f'{document}: {len(steps)} steps ran in {sum(r["seconds"] for r in ran):.0f} s; skipped:')
    for where, command, reason in skipped:
        print(f'  {where}: {command[:80]} ({reason})')
    for r in sorted(ran, key=lambda r: -r['seconds'])[:5]:
        print(f'  slowest: {r["seconds"]:.1f} s {r["where"][:100]}')


def test_readme_set_up_lines_are_one_line_each_and_ci_runs_the_second():
    shell = [body for language, _, body in blocks((REPO / 'README.md').read_text()) if language == 'bash']
    demo, suite = shell[0].strip(), shell[1].strip()
    assert '\n' not in demo and demo.startswith('python3 -m venv .venv && ') and \
        demo.endswith('&& python examples/first_run.py')
    assert '\n' not in suite and suite.endswith('&& python -m pytest -q -n 2 tests')
    ci = [line for line in (REPO / '.ci' / 'run').read_text().splitlines() if line and not line.startswith('#')]
    assert suite in ci, 'CI must run the README\'s test line exactly'


def test_the_plot_the_readme_shows_is_committed_and_small():
    image = REPO / 'docs' / 'pos_similarity.png'
    assert '](docs/pos_similarity.png)' in (REPO / 'README.md').read_text()
    assert image.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n' and image.stat().st_size < 100_000
