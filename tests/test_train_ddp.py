"""Two CPU processes, gloo, DistributedDataParallel: parameters must stay identical across ranks.

Each rank runs ``timm_vit_variants.training.trainer.train`` exactly as ``torchrun`` would start it (the
rendezvous comes from MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE/LOCAL_RANK), on its own shard of a
synthetic ImageFolder, with a different seed per rank. Rank 0 also confirms the limitation the
trainer works around: timm's ``ClassificationTask.prepare_distributed(device_ids=[cpu])``, as
train.py calls it, is rejected by DDP.
"""
import os
from pathlib import Path

import torch
import torch.multiprocessing as mp

from train_fixtures import TINY_MODEL_KWARGS, free_port, make_image_folder

WORLD_SIZE = 2
STEPS = 3


def _worker(rank: int, port: int, data_dir: str, out_dir: str) -> None:
    os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
                      WORLD_SIZE=str(WORLD_SIZE))
    torch.set_num_threads(1)
    import timm
    import torch.distributed as dist
    from timm.task import ClassificationTask
    from timm_vit_variants.training.trainer import parse_args, setup_distributed, train

    env = setup_distributed('cpu')
    assert env.distributed and env.world_size == WORLD_SIZE and dist.get_backend() == 'gloo'
    report = {}
    if rank == 0:
        task = ClassificationTask(timm.create_model('simple_vit_tiny', embed_dim=8, depth=1, num_heads=1), verbose=False)
        try:
            task.prepare_distributed(device_ids=[env.device])
            report['timm_task_error'] = ''
        except ValueError as e:
            report['timm_task_error'] = str(e)

    args = parse_args([
        '--data-dir', data_dir, '--model', 'simple_vit_tiny', '--model-kwargs', *TINY_MODEL_KWARGS,
        '--img-size', '16', '--num-classes', '2', '--batch-size', '4', '--epochs', '2', '--warmup-epochs', '0',
        '--lr', '1e-2', '--clip-grad', '1.0', '--val-split', '', '--device', 'cpu', '--seed', str(100 + rank)])
    result = train(args, env, max_steps=STEPS)
    report.update(state=result.model.state_dict(), losses=result.step_losses)
    torch.save(report, Path(out_dir) / f'rank{rank}.pt')
    dist.destroy_process_group()


def test_two_process_gloo_ddp_keeps_ranks_identical(tmp_path):
    data_dir = make_image_folder(tmp_path / 'data', per_class=8, splits=('train',))
    mp.spawn(_worker, args=(free_port(), str(data_dir), str(tmp_path)), nprocs=WORLD_SIZE, join=True)
    reports = [torch.load(tmp_path / f'rank{r}.pt', weights_only=True) for r in range(WORLD_SIZE)]

    assert 'only work with single-device/multiple-device GPU modules or CPU modules' in reports[0]['timm_task_error']
    for r in reports:
        assert len(r['losses']) == STEPS
    # Different shards: the per-rank losses differ, yet the all-reduced updates leave equal weights.
    assert reports[0]['losses'] != reports[1]['losses']
    state0, state1 = reports[0]['state'], reports[1]['state']
    assert state0.keys() == state1.keys()
    for key in state0:
        assert torch.equal(state0[key], state1[key]), key
    assert state0['head.weight'].abs().sum() > 0  # the zero-initialised head was trained
