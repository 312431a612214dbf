"""The 32x32 small-data recipe (configs/simple_vit_tiny_patch4_32.yaml): valid keys, the design's values, one step."""
import math
import os
import runpy
from pathlib import Path

import pytest
import timm
import yaml

import timm_vit_variants  # noqa: F401
from timm_vit_variants.training.trainer import build_parser, parse_args, train
from train_fixtures import make_image_folder

RECIPE = Path(__file__).resolve().parents[1] / 'configs' / 'simple_vit_tiny_patch4_32.yaml'

# Option dests of timm's train.py (github.com/huggingface/pytorch-image-models, main @ aa4b5850,
# the newest train.py reachable when this was written; timm's wheel and sdist do not ship it).
TRAIN_PY_DESTS = frozenset('''
aa amp amp_dtype aug_repeats aug_splits batch_size bce_loss bce_pos_weight bce_sum bce_target_thresh bn_eps
bn_momentum channels_last checkpoint_hist class_map clip_grad clip_mode color_jitter color_jitter_prob
cooldown_epochs crop_pct cutmix cutmix_minmax data data_dir dataset dataset_download dataset_trust_remote_code
decay_epochs decay_milestones decay_rate device device_modules dist_bn distill_loss_weight drop drop_block
drop_connect drop_path epoch_repeats epochs eval_metric experiment fast_norm fuser gaussian_blur_prob gp
grad_accum_steps grad_checkpointing grayscale_prob head_init_bias head_init_scale hflip img_size in_chans
initial_checkpoint input_img_mode input_key input_size interpolation jsd_loss kd_distill_type kd_loss_type
kd_model_name kd_student_feature_dim kd_teacher_feature_dim kd_temperature kd_token_distill_type layer_decay
layer_decay_min_scale layer_decay_no_opt_scale local_rank log_interval log_wandb lr lr_base lr_base_scale
lr_base_size lr_cycle_decay lr_cycle_limit lr_cycle_mul lr_k_decay lr_noise lr_noise_pct lr_noise_std mean
min_lr mixup mixup_mode mixup_off_epoch mixup_prob mixup_switch_prob model model_dtype model_ema model_ema_decay
model_ema_force_cpu model_ema_warmup model_kwargs momentum naflex_loader naflex_loss_scale naflex_max_seq_len
naflex_patch_size_probs naflex_patch_sizes naflex_patchify_channels_first naflex_train_seq_lens no_aug no_ddp_bb
no_prefetcher no_resume_opt num_classes opt opt_betas opt_eps opt_kwargs output patience_epochs pin_mem
pretrained pretrained_path ratio recount recovery_interval remode reprob resplit resume save_images scale sched
sched_on_updates seed smoothing split_bn start_epoch std sync_bn synchronize_step target_key task_loss_weight
torchcompile torchcompile_mode torchscript train_batch_sizes train_batches_per_epoch train_crop_mode
train_img_sizes train_interpolation train_num_samples train_size_probs train_size_random_mix train_size_schedule
train_size_schedule_spread train_split tta use_multi_epochs_loader val_interval val_num_samples val_split
validation_batch_size variable_batch_loss_scale vflip wandb_project wandb_resume_id wandb_tags warmup_epochs
warmup_lr warmup_prefix weight_decay worker_seeding workers
'''.split())


def _recipe() -> dict:
    with open(RECIPE) as f:
        return yaml.safe_load(f)


def test_recipe_keys_are_train_py_options():
    assert set(_recipe()) <= TRAIN_PY_DESTS


def test_trainer_flags_are_spelt_as_train_py():
    ours = {a.dest for a in build_parser()._actions} - {'help', 'config', 'progress'}
    assert ours <= TRAIN_PY_DESTS, sorted(ours - TRAIN_PY_DESTS)


@pytest.mark.skipif(not os.environ.get('TIMM_TRAIN_SCRIPT'), reason='set TIMM_TRAIN_SCRIPT=/path/to/timm/train.py')
def test_recipe_parses_with_real_train_py():
    # train.py's own two-stage parse: YAML -> parser.set_defaults -> parse_args.
    script = runpy.run_path(os.environ['TIMM_TRAIN_SCRIPT'], run_name='timm_train')
    parser = script['parser']
    parser.set_defaults(**_recipe())
    args = parser.parse_args([])
    assert (args.model, args.opt, args.lr, args.amp_dtype, args.torchcompile) == \
        ('simple_vit_tiny_patch4_32', 'adamw', 3e-4, 'bfloat16', 'inductor')


def test_recipe_matches_design():
    args = parse_args(['--config', str(RECIPE)])
    assert (args.opt, args.lr, args.clip_grad, args.amp, args.amp_dtype, args.torchcompile) == \
        ('adamw', 3e-4, 1.0, True, 'bfloat16', 'inductor')
    assert args.hflip == 0.5 and 0 < args.color_jitter <= 0.2 and args.aa is None
    model = timm.create_model(args.model, num_classes=args.num_classes, drop_path_rate=args.drop_path)
    assert model.patch_embed.patch_size == (4, 4) and model.embed_dim == 192
    assert model.blocks[0].attn.num_heads == 3 and 4 <= len(model.blocks) <= 6
    assert model.patch_embed.img_size == (32, 32)


def test_recipe_runs_one_step(tmp_path):
    data = make_image_folder(tmp_path / 'data', size=32, per_class=4)
    args = parse_args(['--config', str(RECIPE), '--data-dir', str(data), '--device', 'cpu', '--batch-size', '4',
                       '--output', str(tmp_path / 'out')])
    # Compilation is exercised by test_train_timm_path.py::test_torchcompile_inductor on a smaller model.
    args.torchcompile = None
    result = train(args, max_steps=1)
    assert len(result.step_losses) == 1 and math.isfinite(result.step_losses[0])
    assert result.epochs[0].eval is not None
    assert (tmp_path / 'out' / 'last.pth.tar').is_file() and (tmp_path / 'out' / 'args.yaml').is_file()
