"""Throughput of simple_vit vs timm's own ViT, built equivalently, measured alternately in one process.

Reports ratios (timm's time / ours; > 1.0 means we are faster) for inference and a training step,
at the native 224x224 and at 288x288 (timm with dynamic_img_size=True), and the fraction
of plain torch.matmul throughput the model reaches on the same GEMM shapes.

    python benchmarks/bench_models.py                      # CPU, fp32
    python benchmarks/bench_models.py --device cuda --dtype bfloat16 --batch 256   # GPU, one call
    python benchmarks/bench_models.py --clip               # a converted ViT-B/16 CLIP tower vs timm's own
    python benchmarks/bench_models.py --eva02              # EVA-02 Ti/14, S/14 at 336 vs timm's eva02_*
    python benchmarks/bench_models.py --beit               # BEiT v2 B/16, BEiT B/16 at 224 vs timm's beit*
"""
import argparse
import random
import statistics
import tempfile
import time
from typing import Callable, Dict, List, Tuple

import torch
import timm

import timm_vit_variants  # noqa: F401


def _sync(device: torch.device) -> None:
    if device.type == 'cuda':
        torch.cuda.synchronize()


def _time(fn: Callable[[], None], device: torch.device, iters: int) -> float:
    _sync(device)
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    _sync(device)
    return (time.perf_counter() - start) / iters


def build_pair(size: str, device: torch.device, dtype: torch.dtype) -> Tuple[torch.nn.Module, torch.nn.Module]:
    """Ours and timm's ViT with the same compute: no class token, GAP after the final norm, tanh GELU."""
    ours = timm.create_model(f'simple_vit_{size}', num_classes=1000)
    ref = timm.create_model(
        f'vit_{size}_patch16_224', class_token=False, global_pool='avg', fc_norm=False,
        act_layer='gelu_tanh', dynamic_img_size=True, num_classes=1000)
    return ours.to(device, dtype), ref.to(device, dtype)


def vit_gemm_shapes(tokens: int, batch: int, dim: int, mlp: int, depth: int, heads: int, patch: int,
                    classes: int) -> List[Tuple[str, Tuple[int, ...], int]]:
    """(kind, shape, count) for every matmul in one forward; attention as batched matmuls."""
    rows, hd = batch * tokens, dim // heads
    return [
        ('mm', (rows, 3 * patch * patch, dim), 1),
        ('mm', (rows, dim, 3 * dim), depth),
        ('bmm', (batch * heads, tokens, hd, tokens), depth),
        ('bmm', (batch * heads, tokens, tokens, hd), depth),
        ('mm', (rows, dim, dim), depth),
        ('mm', (rows, dim, mlp), depth),
        ('mm', (rows, mlp, dim), depth),
        ('mm', (batch, dim, classes), 1),
    ]


def gemm_flops(shapes) -> float:
    total = 0.
    for kind, shape, count in shapes:
        if kind == 'mm':
            m, k, n = shape
            total += 2. * m * k * n * count
        else:
            b, m, k, n = shape
            total += 2. * b * m * k * n * count
    return total


def matmul_seconds(shapes, device: torch.device, dtype: torch.dtype, iters: int) -> float:
    """Time the model's GEMMs alone with torch.matmul (the roofline this code path can reach)."""
    ops = []
    for kind, shape, count in shapes:
        if kind == 'mm':
            m, k, n = shape
            a, b = torch.randn(m, k, device=device, dtype=dtype), torch.randn(k, n, device=device, dtype=dtype)
        else:
            bt, m, k, n = shape
            a = torch.randn(bt, m, k, device=device, dtype=dtype)
            b = torch.randn(bt, k, n, device=device, dtype=dtype)
        ops.append((a, b, count))

    def run() -> None:
        for a, b, count in ops:
            for _ in range(count):
                torch.matmul(a, b)
    run()
    return _time(run, device, iters)


def compare(ours: torch.nn.Module, ref: torch.nn.Module, x: torch.Tensor, train: bool, rounds: int,
            iters: int) -> Dict[str, float]:
    """Alternate ours/timm, in swapped order every other round; median seconds per step of each."""
    device = x.device
    steps = {}
    for name, model in (('ours', ours), ('timm', ref)):
        if train:
            model.train()
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
            target = torch.randint(0, 1000, (x.shape[0],), device=device)

            def step(model=model, opt=opt, target=target) -> None:
                loss = torch.nn.functional.cross_entropy(model(x).float(), target)
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
        else:
            model.eval()

            def step(model=model) -> None:
                with torch.inference_mode():
                    model(x)
        step()  # warm-up (allocations, caches, optimizer state)
        steps[name] = step
    times = {'ours': [], 'timm': []}
    for r in range(rounds):
        # swap who goes first each round so neither model always runs on a warmer/colder machine
        for name in (('ours', 'timm') if r % 2 == 0 else ('timm', 'ours')):
            times[name].append(_time(steps[name], device, iters))
    return dict({name: statistics.median(t) for name, t in times.items()}, **paired_ratio(times['timm'], times['ours']))


def paired_ratio(timm_s: List[float], ours_s: List[float], resamples: int = 2000) -> Dict[str, float]:
    """timm / ours per round (> 1: we are faster): its median with a 95% bootstrap interval, and the ratio of each
    side's best round (noise on a shared machine only ever adds time, so the best rounds are the least disturbed)."""
    ratios = [t / o for t, o in zip(timm_s, ours_s)]
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(resamples))
    return {'ratio': statistics.median(ratios), 'ratio_lo': medians[int(0.025 * resamples)],
            'ratio_hi': medians[int(0.975 * resamples) - 1], 'best_ratio': min(timm_s) / min(ours_s)}


RATIO_HEADER = f'{"ratio":>8}{"95% interval":>18}{"best":>8}'


def ratio_columns(t: Dict[str, float]) -> str:
    """The paired ratio, its interval and the best-round ratio, under ``RATIO_HEADER``."""
    interval = f'[{t["ratio_lo"]:.3f}, {t["ratio_hi"]:.3f}]'
    return f'{t["ratio"]:>8.3f}{interval:>18}{t["best_ratio"]:>8.3f}'


def op_profile(ours: torch.nn.Module, ref: torch.nn.Module, x: torch.Tensor, top: int = 12) -> None:
    """One inference of each under torch.profiler: per aten op, the call count and self CPU time of both, so a
    speed difference can be told apart from noise (the same kernels at the same counts cost the same)."""
    from torch.profiler import ProfilerActivity, profile

    stats = []
    for model in (ours, ref):
        with torch.inference_mode():
            model(x)
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                model(x)
        stats.append({e.key: (e.count, e.self_cpu_time_total / 1e3) for e in prof.key_averages()})
    keys = sorted(set(stats[0]) | set(stats[1]), key=lambda k: -max(s.get(k, (0, 0.))[1] for s in stats))
    print(f'{"aten op":<52}{"ours calls":>11}{"ours ms":>9}{"timm calls":>11}{"timm ms":>9}')
    for key in keys[:top]:
        (oc, om), (tc, tm) = (s.get(key, (0, 0.)) for s in stats)
        print(f'{key[:51]:<52}{oc:>11}{om:>9.1f}{tc:>11}{tm:>9.1f}')
    extra = [f'{k} ({stats[0].get(k, (0,))[0]} vs {stats[1].get(k, (0,))[0]})' for k in keys
             if stats[0].get(k, (0,))[0] != stats[1].get(k, (0,))[0]]
    print('ops whose call counts differ: ' + (', '.join(extra) or 'none'))


def dino_rows(device: torch.device, dtype: torch.dtype, batch: int, rounds: int, iters: int,
              profile: bool = False) -> None:
    """Inference at 224 of the DINOv2 ViT-S/14 and DINOv3 ViT-S/16 members vs timm's own models of the same weights'
    layout (timm resizes DINOv2's 37x37 table at run time as ours does; DINOv3 is RoPE on both sides)."""
    pairs = (('simple_vit_small_patch14_dinov2', dict(model_name='vit_small_patch14_dinov2', dynamic_img_size=True)),
             ('simple_vit_small_patch16_dinov3', dict(model_name='vit_small_patch16_dinov3_qkvb', global_pool='token')))
    print(f'{"DINO case (infer 224)":<44}{"ours img/s":>12}{"timm img/s":>12}{RATIO_HEADER}')
    x = torch.randn(batch, 3, 224, 224, device=device, dtype=dtype)
    for ours_name, ref_kwargs in pairs:
        ours = timm.create_model(ours_name).to(device, dtype)
        ref = timm.create_model(num_classes=0, **ref_kwargs).to(device, dtype)
        t = compare(ours, ref, x, False, rounds, iters)
        case = f'{ours_name} / {ref_kwargs["model_name"]}'
        print(f'{case:<44}{batch / t["ours"]:>12.1f}{batch / t["timm"]:>12.1f}{ratio_columns(t)}')
        if profile:
            op_profile(ours.eval(), ref.eval(), x)


# Families built on timm's own blocks: (title, image side, (ours, timm's) registry names). timm's Beit and Eva run the
# same EvaBlock / Beit attention maths as ours, so these rows measure the scheme interface's cost.
FAMILIES = {
    'eva02': ('EVA-02 case (infer 336)', 336, (('simple_vit_tiny_patch14_eva02_336', 'eva02_tiny_patch14_336'),
                                              ('simple_vit_small_patch14_eva02_336', 'eva02_small_patch14_336'))),
    'beit': ('BEiT case (infer 224)', 224, (('simple_vit_base_patch16_beitv2_224', 'beitv2_base_patch16_224'),
                                           ('simple_vit_base_patch16_beit_224', 'beit_base_patch16_224'))),
}


def family_rows(family: str, device: torch.device, dtype: torch.dtype, batch: int, rounds: int, iters: int,
                profile: bool = False) -> None:
    """Inference at their own size of a family's members vs timm's own models of it (``FAMILIES``): EVA-02's RoPE
    scaled to the 16x16 pretraining grid, BEiT's relative position bias in every block, on both sides."""
    title, side, pairs = FAMILIES[family]
    print(f'{title:<44}{"ours img/s":>12}{"timm img/s":>12}{RATIO_HEADER}')
    x = torch.randn(batch, 3, side, side, device=device, dtype=dtype)
    for ours_name, ref_name in pairs:
        ours = timm.create_model(ours_name).to(device, dtype)
        ref = timm.create_model(ref_name).to(device, dtype)
        t = compare(ours, ref, x, False, rounds, iters)
        case = f'{ours_name} / {ref_name}'
        print(f'{case:<44}{batch / t["ours"]:>12.1f}{batch / t["timm"]:>12.1f}{ratio_columns(t)}')
        if profile:
            op_profile(ours.eval(), ref.eval(), x)


def converted_clip_pair(device: torch.device, dtype: torch.dtype) -> Tuple[torch.nn.Module, torch.nn.Module]:
    """timm's ``vit_base_patch16_clip_224`` (random weights) and ours converted from its saved folder by our reader."""
    from timm.models import _hub

    from timm_vit_variants.checkpoints import open_checkpoint
    from timm_vit_variants.vision_transformer import SimpleVisionTransformer
    ref = timm.create_model('vit_base_patch16_clip_224', num_classes=512).eval()
    with tempfile.TemporaryDirectory() as folder:
        _hub.save_for_hf(ref, folder, model_args=dict(num_classes=512), safe_serialization=True)
        with open_checkpoint(folder, layout=SimpleVisionTransformer.state_layout) as src:
            ours = SimpleVisionTransformer(src.config.replace(weight_init='skip'))
            ours.load_state_dict(src.state_dict())
    return ours.eval().to(device, dtype), ref.to(device, dtype)


def clip_row(args: argparse.Namespace, device: torch.device, dtype: torch.dtype) -> None:
    """Inference at 224 of a converted ViT-B/16 CLIP tower against timm's own, after checking they agree."""
    ours, ref = converted_clip_pair(device, dtype)
    x = torch.randn(args.batch, 3, 224, 224, device=device, dtype=dtype)
    with torch.inference_mode():
        delta = (ours(x).float() - ref(x).float()).abs().max().item()
    print(f'converted vit_base_patch16_clip_224 (our reader) vs timm vit_base_patch16_clip_224 | device={device} '
          f'dtype={args.dtype} batch={args.batch} threads={torch.get_num_threads()} torch={torch.__version__} '
          f'timm={timm.__version__} | max abs embedding difference {delta:.2e}')
    t = compare(ours, ref, x, False, args.rounds, args.iters)
    print(f'{"case":<22}{"ours img/s":>12}{"timm img/s":>12}{RATIO_HEADER}')
    print(f'{"infer 224x224 CLIP":<22}{args.batch / t["ours"]:>12.1f}{args.batch / t["timm"]:>12.1f}'
          f'{ratio_columns(t)}')
    if args.profile:
        op_profile(ours, ref, x)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--size', default='small', choices=['tiny', 'small', 'base'])
    parser.add_argument('--batch', type=int, default=8)
    parser.add_argument('--rounds', type=int, default=5)
    parser.add_argument('--iters', type=int, default=2)
    parser.add_argument('--device', default='cpu')
    parser.add_argument('--dtype', default='float32', choices=['float32', 'bfloat16'])
    parser.add_argument('--dino', action='store_true', help='only the DINOv2 S/14 and DINOv3 S/16 rows')
    parser.add_argument('--clip', action='store_true', help='only the converted ViT-B/16 CLIP row')
    parser.add_argument('--eva02', action='store_true', help="only the EVA-02 Ti/14 and S/14 rows vs timm's eva02_*")
    parser.add_argument('--beit', action='store_true', help="only the BEiT v2 and BEiT B/16 rows vs timm's beit*")
    parser.add_argument('--profile', action='store_true',
                        help="with --dino, --eva02, --beit or --clip: also each aten op's calls and self time, ours and "
                             "timm's")
    args = parser.parse_args()
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    torch.manual_seed(0)
    if args.dino:
        return dino_rows(device, dtype, args.batch, args.rounds, args.iters, args.profile)
    for family in FAMILIES:
        if getattr(args, family):
            return family_rows(family, device, dtype, args.batch, args.rounds, args.iters, args.profile)
    if args.clip:
        clip_row(args, device, dtype)
        return
    ours, ref = build_pair(args.size, device, dtype)
    dim, depth, heads = ours.embed_dim, len(ours.blocks), ours.blocks[0].attn.num_heads
    mlp = ours.blocks[0].mlp.fc1.out_features
    print(f'simple_vit_{args.size} vs timm vit_{args.size}_patch16_224 (class_token=False, global_pool=avg, '
          f'fc_norm=False, gelu_tanh) | device={device} dtype={args.dtype} batch={args.batch} '
          f'threads={torch.get_num_threads()} torch={torch.__version__} timm={timm.__version__}')
    print(f'{"case":<22}{"ours img/s":>12}{"timm img/s":>12}{"ratio":>8}{"ours GFLOP/s":>14}{"matmul frac":>13}')
    for side in (224, 288):
        x = torch.randn(args.batch, 3, side, side, device=device, dtype=dtype)
        tokens = (side // 16) ** 2
        shapes = vit_gemm_shapes(tokens, args.batch, dim, mlp, depth, heads, 16, 1000)
        flops = gemm_flops(shapes)
        mm_s = matmul_seconds(shapes, device, dtype, args.iters)
        for train in (False, True):
            t = compare(ours, ref, x, train, args.rounds, args.iters)
            step_flops = flops * (3 if train else 1)  # backward ~ 2x forward
            gflops = step_flops / t['ours'] / 1e9
            frac = (mm_s * (3 if train else 1)) / t['ours']
            case = f'{"train" if train else "infer"} {side}x{side}'
            print(f'{case:<22}{args.batch / t["ours"]:>12.1f}{args.batch / t["timm"]:>12.1f}'
                  f'{t["timm"] / t["ours"]:>8.3f}{gflops:>14.1f}{frac:>13.2f}')


if __name__ == '__main__':
    main()
