"""Stand-in for timm's onnx_export.py (aa4b5850): create_model(in_chans=3, pretrained unless --checkpoint,
exportable=True), then timm.utils.onnx.onnx_export with the script's arguments (TorchScript exporter by default,
the dynamo one with --dynamo)."""
import argparse
import json

import timm
from timm.utils.onnx import onnx_export

parser = argparse.ArgumentParser()
parser.add_argument('output')
parser.add_argument('--model', '-m', default='mobilenetv3_large_100')
parser.add_argument('--opset', type=int)
parser.add_argument('--dynamic-size', action='store_true')
parser.add_argument('--check-forward', action='store_true')
parser.add_argument('-b', '--batch-size', type=int, default=1)
parser.add_argument('--img-size', type=int)
parser.add_argument('--num-classes', type=int)
parser.add_argument('--checkpoint', default='')
parser.add_argument('--dynamo', action='store_true')


def main():
    args = parser.parse_args()
    model = timm.create_model(args.model, num_classes=args.num_classes, in_chans=3, pretrained=not args.checkpoint,
                              checkpoint_path=args.checkpoint, exportable=True)
    input_size = (3, args.img_size, args.img_size) if args.img_size is not None else None
    onnx_export(model, args.output, opset=args.opset, dynamic_size=args.dynamic_size, aten_fallback=False,
                keep_initializers=False, check_forward=args.check_forward, training=False, verbose=False,
                use_dynamo=args.dynamo, input_size=input_size, batch_size=args.batch_size)
    print('--result')
    print(json.dumps({'model': args.model, 'output': args.output, 'dynamic_size': args.dynamic_size}))


if __name__ == '__main__':
    main()
