"""Stand-in for timm's onnx_validate.py (aa4b5850): an ONNX Runtime session (all graph optimisations),
resolve_data_config from the arguments alone (no model), create_loader(create_dataset('', data)) and
numpy top-1/top-5."""
import argparse
import json

import numpy as np
import onnxruntime
from timm.data import create_dataset, create_loader, resolve_data_config

parser = argparse.ArgumentParser()
parser.add_argument('data')
parser.add_argument('--onnx-input', default='')
parser.add_argument('-j', '--workers', type=int, default=2)
parser.add_argument('-b', '--batch-size', type=int, default=256)
parser.add_argument('--img-size', type=int)
parser.add_argument('--mean', type=float, nargs='+')
parser.add_argument('--std', type=float, nargs='+')
parser.add_argument('--crop-pct', type=float)
parser.add_argument('--interpolation', default='')


def main():
    args = parser.parse_args()
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = onnxruntime.InferenceSession(args.onnx_input, options, providers=['CPUExecutionProvider'])
    data_config = resolve_data_config(vars(args))
    loader = create_loader(
        create_dataset('', args.data), input_size=data_config['input_size'], batch_size=args.batch_size,
        use_prefetcher=False, interpolation=data_config['interpolation'], mean=data_config['mean'],
        std=data_config['std'], num_workers=args.workers, crop_pct=data_config['crop_pct'])
    name = session.get_inputs()[0].name
    hits1 = hits5 = count = 0
    for input, target in loader:
        order = np.argsort(session.run([], {name: input.numpy()})[0], axis=1)[:, ::-1]
        hits1 += int((order[:, 0] == target.numpy()).sum())
        hits5 += int((order[:, :5] == target.numpy()[:, None]).sum())
        count += len(target)
    print('--result')
    print(json.dumps({'top1': round(100 * hits1 / count, 4), 'top5': round(100 * hits5 / count, 4),
                      'img_size': data_config['input_size'][-1]}))


if __name__ == '__main__':
    main()
