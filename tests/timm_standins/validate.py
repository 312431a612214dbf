"""Stand-in for timm's validate.py (aa4b5850): create_model, load_checkpoint, resolve_data_config, create_dataset,
create_loader and top-1/top-5 accuracy, in validate.py's order."""
import argparse
import json

import torch
from timm.data import create_dataset, create_loader, resolve_data_config
from timm.models import create_model, load_checkpoint
from timm.utils import AverageMeter, ParseKwargs, accuracy

parser = argparse.ArgumentParser()
parser.add_argument('data', nargs='?')
parser.add_argument('--data-dir')
parser.add_argument('--split', default='validation')
parser.add_argument('--model', '-m', default='dpn92')
parser.add_argument('--pretrained', action='store_true')
parser.add_argument('-j', '--workers', type=int, default=4)
parser.add_argument('-b', '--batch-size', type=int, default=256)
parser.add_argument('--img-size', type=int)
parser.add_argument('--in-chans', type=int)
parser.add_argument('--input-size', nargs=3, type=int)
parser.add_argument('--use-train-size', action='store_true')
parser.add_argument('--crop-pct', type=float)
parser.add_argument('--mean', type=float, nargs='+')
parser.add_argument('--std', type=float, nargs='+')
parser.add_argument('--interpolation', default='')
parser.add_argument('--num-classes', type=int)
parser.add_argument('--gp')
parser.add_argument('--checkpoint', default='')
parser.add_argument('--no-prefetcher', action='store_true')
parser.add_argument('--device', default='cuda')
parser.add_argument('--model-kwargs', nargs='*', default={}, action=ParseKwargs)
parser.add_argument('--torchscript', action='store_true')


def main():
    args = parser.parse_args()
    args.pretrained = args.pretrained or not args.checkpoint
    in_chans = args.in_chans or (args.input_size[0] if args.input_size else 3)
    model = create_model(args.model, pretrained=args.pretrained, num_classes=args.num_classes, in_chans=in_chans,
                         global_pool=args.gp, scriptable=args.torchscript, **args.model_kwargs)
    if args.checkpoint:
        load_checkpoint(model, args.checkpoint)
    data_config = resolve_data_config(vars(args), model=model, use_test_size=not args.use_train_size, verbose=True)
    device = torch.device(args.device)
    model = model.to(device)
    if args.torchscript:
        model = torch.jit.script(model)
    dataset = create_dataset(root=args.data or args.data_dir, name='', split=args.split,
                             input_img_mode='RGB' if data_config['input_size'][0] == 3 else 'L')
    loader = create_loader(
        dataset, input_size=data_config['input_size'], batch_size=args.batch_size,
        use_prefetcher=not args.no_prefetcher, interpolation=data_config['interpolation'], mean=data_config['mean'],
        std=data_config['std'], num_workers=args.workers, crop_pct=data_config['crop_pct'],
        crop_mode=data_config['crop_mode'], device=device)
    top1, top5 = AverageMeter(), AverageMeter()
    model.eval()
    with torch.inference_mode():
        model(torch.randn((args.batch_size,) + tuple(data_config['input_size']), device=device))  # warm-up
        for input, target in loader:
            if args.no_prefetcher:
                input, target = input.to(device), target.to(device)
            output = model(input)
            acc1, acc5 = accuracy(output, target, topk=(1, 5))
            top1.update(acc1.item(), output.shape[0])
            top5.update(acc5.item(), output.shape[0])
    print('--result')
    print(json.dumps({'model': args.model, 'top1': round(top1.avg, 4), 'top5': round(top5.avg, 4),
                      'img_size': data_config['input_size'][-1], 'crop_pct': data_config['crop_pct']}))


if __name__ == '__main__':
    main()
