"""Stand-in for timm's inference.py (aa4b5850): create_model with pretrained/checkpoint_path, resolve_data_config,
create_dataset, create_loader(**data_config), top-k, and class names from pretrained_cfg['label_names'] through
CustomDatasetInfo and DatasetInfoLabelMapper. Writes JSON where the real script needs pandas."""
import argparse
import json

import numpy as np
import torch
from timm.data import CustomDatasetInfo, DatasetInfoLabelMapper, create_dataset, create_loader, resolve_data_config
from timm.models import create_model
from timm.utils import ParseKwargs

parser = argparse.ArgumentParser()
parser.add_argument('data', nargs='?')
parser.add_argument('--data-dir')
parser.add_argument('--split', default='validation')
parser.add_argument('--model', '-m', default='resnet50')
parser.add_argument('--pretrained', action='store_true')
parser.add_argument('--checkpoint', default='')
parser.add_argument('-j', '--workers', type=int, default=2)
parser.add_argument('-b', '--batch-size', type=int, default=256)
parser.add_argument('--img-size', type=int)
parser.add_argument('--in-chans', type=int)
parser.add_argument('--num-classes', type=int)
parser.add_argument('--device', default='cuda')
parser.add_argument('--topk', type=int, default=1)
parser.add_argument('--label-type', default='description')
parser.add_argument('--results-file')
parser.add_argument('--model-kwargs', nargs='*', default={}, action=ParseKwargs)


def main():
    args = parser.parse_args()
    args.pretrained = args.pretrained or not args.checkpoint
    model = create_model(args.model, num_classes=args.num_classes, in_chans=args.in_chans or 3,
                         pretrained=args.pretrained, checkpoint_path=args.checkpoint, **args.model_kwargs)
    args.num_classes = args.num_classes or model.num_classes
    pretrained_cfg = dict(getattr(model, 'pretrained_cfg', {}) or {})
    data_config = resolve_data_config(vars(args), model=model)
    device = torch.device(args.device)
    model = model.to(device).eval()
    dataset = create_dataset(root=args.data or args.data_dir, name='', split=args.split)
    loader = create_loader(dataset, batch_size=args.batch_size, use_prefetcher=True, num_workers=args.workers,
                           device=device, **data_config)
    info = CustomDatasetInfo(label_names=pretrained_cfg['label_names'],
                             label_descriptions=pretrained_cfg.get('label_descriptions'))
    to_label = np.vectorize(DatasetInfoLabelMapper(info, label_type=args.label_type), otypes=[object])
    top_k = min(args.topk, args.num_classes)
    indices, labels = [], []
    with torch.inference_mode():
        for input, _ in loader:
            _, index = model(input).topk(top_k)
            indices.append(index.cpu().numpy())
            labels.append(to_label(indices[-1]))
    names = loader.dataset.filenames(basename=False)
    rows = {name: {'index': i.tolist(), 'label': list(lab)}
            for name, i, lab in zip(names, np.concatenate(indices), np.concatenate(labels))}
    with open(args.results_file, 'w') as fh:
        json.dump(rows, fh)
    print('--result')
    print(json.dumps({'model': args.model, 'images': len(rows), 'img_size': data_config['input_size'][-1]}))


if __name__ == '__main__':
    main()
