"""Stand-in for timm's benchmark.py (aa4b5850): BenchmarkRunner's create_model (in_chans=3, no weights),
resolve_data_config, optional torch.jit.script, then InferenceBenchmarkRunner and TrainBenchmarkRunner steps
(CrossEntropyLoss, create_optimizer_v2)."""
import argparse
import json
import time

import torch
import torch.nn as nn
from timm.data import resolve_data_config
from timm.models import create_model
from timm.optim import create_optimizer_v2
from timm.utils import ParseKwargs

parser = argparse.ArgumentParser()
parser.add_argument('--model', '-m', default='resnet50')
parser.add_argument('--bench', default='both')
parser.add_argument('--num-warm-iter', type=int, default=10)
parser.add_argument('--num-bench-iter', type=int, default=40)
parser.add_argument('--device', default='cuda')
parser.add_argument('-b', '--batch-size', type=int, default=256)
parser.add_argument('--img-size', type=int)
parser.add_argument('--input-size', nargs=3, type=int)
parser.add_argument('--use-train-size', action='store_true')
parser.add_argument('--num-classes', type=int)
parser.add_argument('--gp')
parser.add_argument('--model-kwargs', nargs='*', default={}, action=ParseKwargs)
parser.add_argument('--torchscript', action='store_true')


def _rate(step, args) -> float:
    for _ in range(args.num_warm_iter):
        step()
    start = time.perf_counter()
    for _ in range(args.num_bench_iter):
        step()
    return round(args.batch_size * args.num_bench_iter / (time.perf_counter() - start), 2)


def main():
    args = parser.parse_args()
    kwargs = vars(args)
    model = create_model(args.model, num_classes=kwargs.pop('num_classes'), in_chans=3, global_pool=kwargs.pop('gp'),
                         scriptable=args.torchscript, drop_rate=0., drop_path_rate=None, drop_block_rate=None,
                         **kwargs.pop('model_kwargs'))
    model.to(device=args.device)
    num_classes = model.num_classes
    data_config = resolve_data_config(kwargs, model=model, use_test_size=not args.use_train_size)
    input_size = data_config['input_size']
    if args.torchscript:
        model = torch.jit.script(model)
    example = torch.randn((args.batch_size,) + tuple(input_size), device=args.device)
    result = {'model': args.model, 'img_size': input_size[-1],
              'param_count': sum(p.numel() for p in model.parameters())}
    if args.bench in ('both', 'infer'):
        model.eval()
        with torch.inference_mode():
            result['infer_samples_per_sec'] = _rate(lambda: model(example), args)
    if args.bench in ('both', 'train'):
        model.train()
        loss = nn.CrossEntropyLoss().to(args.device)
        optimizer = create_optimizer_v2(model, opt='sgd', lr=1e-4)

        def step():
            optimizer.zero_grad()
            output = model(example)
            target = torch.empty(output.shape[0], device=args.device, dtype=torch.long).random_(num_classes)
            loss(output, target).backward()
            optimizer.step()
        result['train_samples_per_sec'] = _rate(step, args)
    print('--result')
    print(json.dumps(result))


if __name__ == '__main__':
    main()
