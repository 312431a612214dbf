"""NaFlex throughput: a batch of images at their own sizes, ours packed against timm's padded NaFlexVit and
vit-pytorch's packed NaViT, in one process, as ratios (the machine is shared and noisy).

The workload (issue 19): 64 images whose sides are drawn from 32 to 224 px in steps of 16, at their native
size; patch 16, width 192, depth 4, 3 heads, MLP 768, no classifier. What runs on it:

  ours list      ``SimpleVisionTransformer`` on the list of CHW images (patchified and packed inside)
  ours dict      the same model on timm's padded NaFlex dict (packed inside)
  timm dict      timm ``NaFlexVit`` with the same dimensions on the padded dict (it attends over the padding)
  NaViT          vit-pytorch's ``NaViT`` on the list (``group_images=True``: it packs too)

Outputs are checked first: ours on the list equals each image run alone (max |d| printed). Then the
same for the resize-to-budget mode (every image resized to at most ``--budget`` patches with
``ResizeToBudget``, big_vision's rule). Reported: images/s of each, ratios to ours, and the share of
the tokens timm's padded batch spends on padding (which the packed rows avoid).

Last, one attention (3 heads of 64) over the native workload's sequences in each form PyTorch offers,
each checked against one SDPA call per image: the packed rows with an additive block-diagonal mask
(what the model runs), padding to the longest with a key mask (timm's), one call per image, nested
jagged tensors, and FlexAttention with a block mask, eager and compiled.

Run: ``python benchmarks/bench_naflex.py --rounds 5`` (``--device cuda`` on a GPU machine;
``pip install vit-pytorch`` for the NaViT row).
"""
import argparse
import json
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Callable, Dict, List

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from timm_vit_variants import SimpleVisionTransformer  # noqa: E402
from timm_vit_variants.packing import pack_sequences  # noqa: E402
from timm_vit_variants.naflex_transforms import ResizeToBudget, naflex_batch  # noqa: E402

DIMS = dict(embed_dim=192, depth=4, num_heads=3, mlp_dim=768, patch_size=16)


def workload(count: int, seed: int) -> List[torch.Tensor]:
    """``count`` images with sides drawn from 32..224 px in steps of 16."""
    generator = torch.Generator().manual_seed(seed)
    sides = torch.arange(32, 225, 16)
    out = []
    for _ in range(count):
        h, w = sides[torch.randint(len(sides), (2,), generator=generator)].tolist()
        out.append(torch.randn(3, h, w, generator=generator))
    return out


def models(device: str, largest: int) -> Dict[str, torch.nn.Module]:
    """The three networks; NaViT's factorised tables must cover ``largest`` px."""
    from timm.models.naflexvit import NaFlexVit, NaFlexVitCfg

    torch.manual_seed(0)
    built = {
        # exact GELU, as timm's NaFlexVit and NaViT use (the tanh form costs more on CPU)
        'ours': SimpleVisionTransformer(img_size=224, pos_embed='learn', global_pool='avg', num_classes=0,
                                        pos_embed_resample='flexi', act_layer='gelu', **DIMS),
        'timm': NaFlexVit(NaFlexVitCfg(patch_size=16, embed_dim=192, depth=4, num_heads=3, mlp_ratio=4.0,
                                       global_pool='avg', pos_embed_grid_size=(14, 14),
                                       pos_embed_interp_mode='bilinear'), num_classes=0),
    }
    try:
        from vit_pytorch.na_vit import NaViT

        built['navit'] = NaViT(image_size=largest, patch_size=16, num_classes=1000, dim=192, depth=4, heads=3,
                               dim_head=64, mlp_dim=768)
    except ImportError:
        print('vit-pytorch is not installed: the NaViT row is left out (pip install vit-pytorch)', file=sys.stderr)
    return {k: m.to(device).eval() for k, m in built.items()}


def timed(fn: Callable[[], object], device: str, repeat: int) -> float:
    """Best of ``repeat`` wall times of ``fn`` (after one warm-up call)."""
    with torch.no_grad():  # not inference_mode: nested jagged tensors refuse inference tensors
        fn()
        best = float('inf')
        for _ in range(repeat):
            if device == 'cuda':
                torch.cuda.synchronize()
            start = time.perf_counter()
            fn()
            if device == 'cuda':
                torch.cuda.synchronize()
            best = min(best, time.perf_counter() - start)
    return best


def run(images: List[torch.Tensor], nets: Dict[str, torch.nn.Module], device: str, repeat: int,
        navit_len: int) -> Dict[str, float]:
    images = [im.to(device) for im in images]
    batch = {k: v.to(device) for k, v in naflex_batch(images, 16).items()}
    timm_batch = dict(patches=batch['patches'], patch_coord=batch['patch_coord'], patch_valid=batch['patch_valid'])
    cases = {
        'ours list': lambda: nets['ours'](images),
        'ours dict': lambda: nets['ours'](batch),
        'timm dict': lambda: nets['timm'](timm_batch),
    }
    if 'navit' in nets:
        cases['NaViT'] = lambda: nets['navit'](images, group_images=True, group_max_seq_len=navit_len)
    return {name: len(images) / timed(fn, device, repeat) for name, fn in cases.items()}


def alone_error(model: torch.nn.Module, images: List[torch.Tensor], device: str) -> float:
    with torch.inference_mode():
        together = model([im.to(device) for im in images])
        alone = torch.cat([model(im[None].to(device)) for im in images])
    return (together - alone).abs().max().item()


def attention_forms(lengths: List[int], device: str, repeat: int, heads: int = 3,
                    head_dim: int = 64) -> Dict[str, Callable[[], torch.Tensor]]:
    """One attention over sequences of ``lengths`` in each form; every entry returns the (sum(lengths), H*hd)
    outputs, images one after another, so that each can be checked against one SDPA call per image."""
    warnings.filterwarnings('ignore', message='.*(nested tensors|flex_attention called without).*')
    sdpa = torch.nn.functional.scaled_dot_product_attention
    generator = torch.Generator().manual_seed(0)
    seqs = [torch.randn(heads, n, head_dim, generator=generator).to(device) for n in lengths]  # q = k = v
    flat = torch.cat([s.transpose(0, 1).reshape(n, -1) for s, n in zip(seqs, lengths)])
    packed, = pack_sequences(lengths, device=device)  # one chunk: this workload's mask is far below the budget
    rows = packed.scatter(flat).view(packed.rows, packed.capacity, heads, head_dim).transpose(1, 2).contiguous()
    mask = packed.attn_mask(rows.dtype)
    longest = max(lengths)
    padded = rows.new_zeros(len(seqs), heads, longest, head_dim)
    for i, s in enumerate(seqs):
        padded[i, :, :s.shape[1]] = s
    valid = torch.arange(longest, device=device)[None] < torch.tensor(lengths, device=device)[:, None]
    key_mask = rows.new_zeros(valid.shape).masked_fill_(~valid, float('-inf'))[:, None, None]
    nested = torch.nested.nested_tensor([s.transpose(0, 1) for s in seqs], layout=torch.jagged).transpose(1, 2)

    def from_rows(out: torch.Tensor) -> torch.Tensor:
        tokens = flat.new_empty(flat.shape)
        packed.gather(out.transpose(1, 2).reshape(packed.rows, packed.capacity, -1), tokens)
        return tokens

    def from_list(outs: List[torch.Tensor]) -> torch.Tensor:
        return torch.cat([o.transpose(0, 1).reshape(o.shape[1], -1) for o in outs])

    forms = {
        'packed rows + mask': lambda: from_rows(sdpa(rows, rows, rows, attn_mask=mask)),
        'padded + key mask': lambda: torch.cat([o[:, :n].transpose(0, 1).reshape(n, -1) for o, n in
                                                zip(sdpa(padded, padded, padded, attn_mask=key_mask), lengths)]),
        'one call per image': lambda: from_list([sdpa(s[None], s[None], s[None])[0] for s in seqs]),
        'nested jagged': lambda: from_list(sdpa(nested, nested, nested).unbind()),
    }
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    image = packed.image

    def same_image(b, h, q, kv):
        return (image[b, q] == image[b, kv]) | (q == kv)

    block = create_block_mask(same_image, B=packed.rows, H=None, Q_LEN=packed.capacity, KV_LEN=packed.capacity,
                              device=device)
    compiled = torch.compile(flex_attention, dynamic=False)
    forms['FlexAttention eager'] = lambda: from_rows(flex_attention(rows, rows, rows, block_mask=block))
    forms['FlexAttention compiled'] = lambda: from_rows(compiled(rows, rows, rows, block_mask=block))
    return forms


def attention_report(lengths: List[int], device: str, repeat: int, rounds: int) -> Dict[str, dict]:
    """Median seconds (and range) of each attention form, and its max |d| from one call per image."""
    forms = attention_forms(lengths, device, repeat)
    with torch.no_grad():
        truth = forms['one call per image']()
    out = {}
    for name, fn in forms.items():
        try:
            with torch.no_grad():
                err = (fn() - truth).abs().max().item()
            times = [timed(fn, device, repeat) for _ in range(rounds)]
        except Exception as e:  # noqa: BLE001  (a form this PyTorch build cannot run is reported, not fatal)
            out[name] = dict(error=f'{type(e).__name__}: {str(e).splitlines()[0][:120]}')
            continue
        out[name] = dict(seconds=statistics.median(times), spread=(min(times), max(times)), max_abs=err)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--images', type=int, default=64)
    p.add_argument('--rounds', type=int, default=3, help='rounds (each the best of --repeat calls); medians shown')
    p.add_argument('--repeat', type=int, default=3)
    p.add_argument('--budget', type=int, default=256, help='patches per image in the resize-to-budget mode')
    p.add_argument('--navit-len', type=int, default=256, help="NaViT's group_max_seq_len (its packed row length)")
    p.add_argument('--device', default='cpu')
    p.add_argument('--seed', type=int, default=0)
    p.add_argument('--json', metavar='FILE', help='also write the figures here')
    args = p.parse_args()
    native = workload(args.images, args.seed)
    resize = ResizeToBudget(16, args.budget)
    budget = [resize(im) for im in native]
    nets = models(args.device, max(max(im.shape[1:]) for im in native + budget))
    report = {'device': args.device, 'torch': torch.__version__, 'threads': torch.get_num_threads(), 'modes': {}}
    for mode, images in (('native', native), (f'budget {args.budget}', budget)):
        tokens = [(im.shape[1] // 16) * (im.shape[2] // 16) for im in images]
        padding = 1 - sum(tokens) / (len(tokens) * max(tokens))
        err = alone_error(nets['ours'], images, args.device)
        rounds = [run(images, nets, args.device, args.repeat, args.navit_len) for _ in range(args.rounds)]
        rates = {name: statistics.median(r[name] for r in rounds) for name in rounds[0]}
        report['modes'][mode] = dict(tokens=sum(tokens), padding_share_timm=padding, max_abs_vs_alone=err,
                                     images_per_s=rates, spread={n: (min(r[n] for r in rounds),
                                                                     max(r[n] for r in rounds)) for n in rates})
        print(f'\n{mode}: {len(images)} images, {sum(tokens)} tokens; timm pads {padding:.0%} of its batch; '
              f'ours list vs each image alone: max|d|={err:.1e}')
        print(f'{"":12s} {"images/s":>10s} {"ours list / it":>15s}')
        for name, rate in rates.items():
            print(f'{name:12s} {rate:10.1f} {rates["ours list"] / rate:15.2f}x')
    lengths = [(im.shape[1] // 16) * (im.shape[2] // 16) for im in native]
    report['attention'] = attention = attention_report(lengths, args.device, args.repeat, args.rounds)
    print(f'\nattention alone over the native sequences ({len(lengths)} images, 3 heads of 64)')
    base = attention['packed rows + mask']['seconds']
    for name, row in attention.items():
        if 'error' in row:
            print(f'{name:24s} fails: {row["error"]}')
        else:
            print(f'{name:24s} {row["seconds"] * 1e3:8.2f} ms  max|d|={row["max_abs"]:.1e}  '
                  f'time / packed rows {row["seconds"] / base:5.2f}')
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == '__main__':
    sys.exit(main())
