"""Census programs on diffusers (hf5 environment): UNets, VAEs, DiT, schedulers' step loops.

    python bench/census/programs/diffusers_programs.py NAME
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
from census import Program, main

UNET = dict(sample_size=16, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(16, 32),
            norm_num_groups=8, down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
            up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), cross_attention_dim=16, attention_head_dim=4)


def unet2d_cond_eval(c):
    from diffusers import UNet2DConditionModel
    m = UNet2DConditionModel(**UNET)
    c.eval_calls(m, dict(sample=torch.randn(2, 4, 16, 16), timestep=torch.tensor([10, 500]),
                         encoder_hidden_states=torch.randn(2, 6, 16), return_dict=False))


def unet2d_cond_train(c):
    from diffusers import UNet2DConditionModel
    m = UNet2DConditionModel(**UNET)
    c.train_steps(m, dict(sample=torch.randn(2, 4, 16, 16), timestep=torch.tensor([10, 500]),
                          encoder_hidden_states=torch.randn(2, 6, 16)),
                  loss_fn=lambda out: out.sample.pow(2).mean())


def unet2d_eval(c):
    from diffusers import UNet2DModel
    m = UNet2DModel(sample_size=16, in_channels=3, out_channels=3, layers_per_block=1, block_out_channels=(16, 32),
                    norm_num_groups=8, down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                    up_block_types=("AttnUpBlock2D", "UpBlock2D"))
    c.eval_calls(m, dict(sample=torch.randn(2, 3, 16, 16), timestep=5))


def unet1d_eval(c):
    from diffusers import UNet1DModel
    m = UNet1DModel(sample_size=32, in_channels=2, out_channels=2, extra_in_channels=16, block_out_channels=(32, 32, 64),
                    down_block_types=("DownBlock1DNoSkip", "DownBlock1D", "AttnDownBlock1D"),
                    up_block_types=("AttnUpBlock1D", "UpBlock1D", "UpBlock1DNoSkip"))
    c.eval_calls(m, dict(sample=torch.randn(2, 2, 32), timestep=torch.tensor([3.0, 7.0])))


def vae_eval(c):
    from diffusers import AutoencoderKL
    m = AutoencoderKL(in_channels=3, out_channels=3, block_out_channels=(16, 32), layers_per_block=1,
                      norm_num_groups=8, latent_channels=4,
                      down_block_types=("DownEncoderBlock2D", "DownEncoderBlock2D"),
                      up_block_types=("UpDecoderBlock2D", "UpDecoderBlock2D"))
    c.eval_calls(m, dict(sample=torch.randn(2, 3, 32, 32), sample_posterior=True,
                         generator=None))


def vae_tiny_eval(c):
    from diffusers import AutoencoderTiny
    m = AutoencoderTiny(encoder_block_out_channels=(8, 8, 8, 8), decoder_block_out_channels=(8, 8, 8, 8),
                        num_encoder_blocks=(1, 1, 1, 1), num_decoder_blocks=(1, 1, 1, 1))
    c.eval_calls(m, dict(sample=torch.rand(1, 3, 32, 32)))


def vq_model_eval(c):
    from diffusers import VQModel
    m = VQModel(block_out_channels=(16, 32), layers_per_block=1, norm_num_groups=8, latent_channels=4,
                num_vq_embeddings=32, down_block_types=("DownEncoderBlock2D", "DownEncoderBlock2D"),
                up_block_types=("UpDecoderBlock2D", "UpDecoderBlock2D"))
    c.eval_calls(m, dict(sample=torch.randn(2, 3, 16, 16)))


def dit_eval(c):
    from diffusers import DiTTransformer2DModel
    m = DiTTransformer2DModel(num_attention_heads=2, attention_head_dim=8, in_channels=4, num_layers=2,
                              sample_size=8, patch_size=2, num_embeds_ada_norm=10, norm_num_groups=8)
    c.eval_calls(m, dict(hidden_states=torch.randn(2, 4, 8, 8), timestep=torch.tensor([1, 5]),
                         class_labels=torch.tensor([0, 3])))


def sd3_transformer_eval(c):
    from diffusers import SD3Transformer2DModel
    m = SD3Transformer2DModel(sample_size=8, patch_size=2, in_channels=4, num_layers=2, attention_head_dim=8,
                              num_attention_heads=2, joint_attention_dim=16, caption_projection_dim=16,
                              pooled_projection_dim=8, out_channels=4, pos_embed_max_size=16)
    c.eval_calls(m, dict(hidden_states=torch.randn(2, 4, 8, 8), encoder_hidden_states=torch.randn(2, 5, 16),
                         pooled_projections=torch.randn(2, 8), timestep=torch.tensor([1, 5])))


def flux_transformer_eval(c):
    from diffusers import FluxTransformer2DModel
    m = FluxTransformer2DModel(patch_size=1, in_channels=8, num_layers=1, num_single_layers=1, attention_head_dim=8,
                               num_attention_heads=2, joint_attention_dim=16, pooled_projection_dim=8,
                               axes_dims_rope=(2, 2, 4))
    c.eval_calls(m, dict(hidden_states=torch.randn(1, 16, 8), encoder_hidden_states=torch.randn(1, 4, 16),
                         pooled_projections=torch.randn(1, 8), timestep=torch.tensor([0.5]),
                         img_ids=torch.zeros(16, 3), txt_ids=torch.zeros(4, 3)))


def _sched_loop(c, sched, steps=4, shape=(1, 4, 8, 8), **kw):
    """A denoising loop: the scheduler's step() compiled with a toy denoiser."""
    sched.set_timesteps(steps)
    net = torch.nn.Conv2d(shape[1], shape[1], 3, padding=1)

    def step(x, t):
        eps = net(x) * 0.1
        return sched.step(eps, t, x, **kw).prev_sample

    cstep = c.compile(step)
    with torch.no_grad():
        for run in range(2):
            torch.manual_seed(run)
            sched.set_timesteps(steps)
            x = torch.randn(shape) * getattr(sched, "init_noise_sigma", 1.0)
            for t in sched.timesteps:
                x = cstep(sched.scale_model_input(x, t), t)
            c.record(f"run{run}", x)


def sched_ddpm_eval(c):
    from diffusers import DDPMScheduler
    _sched_loop(c, DDPMScheduler(num_train_timesteps=100))


def sched_ddim_eval(c):
    from diffusers import DDIMScheduler
    _sched_loop(c, DDIMScheduler(num_train_timesteps=100))


def sched_euler_eval(c):
    from diffusers import EulerDiscreteScheduler
    _sched_loop(c, EulerDiscreteScheduler(num_train_timesteps=100))


def sched_euler_ancestral_eval(c):
    from diffusers import EulerAncestralDiscreteScheduler
    _sched_loop(c, EulerAncestralDiscreteScheduler(num_train_timesteps=100))


def sched_dpmpp_eval(c):
    from diffusers import DPMSolverMultistepScheduler
    _sched_loop(c, DPMSolverMultistepScheduler(num_train_timesteps=100))


def sched_unipc_eval(c):
    from diffusers import UniPCMultistepScheduler
    _sched_loop(c, UniPCMultistepScheduler(num_train_timesteps=100))


def sched_heun_eval(c):
    from diffusers import HeunDiscreteScheduler
    _sched_loop(c, HeunDiscreteScheduler(num_train_timesteps=100))


def sched_lms_eval(c):
    from diffusers import LMSDiscreteScheduler
    _sched_loop(c, LMSDiscreteScheduler(num_train_timesteps=100))


def sched_pndm_eval(c):
    from diffusers import PNDMScheduler
    _sched_loop(c, PNDMScheduler(num_train_timesteps=100))


def sched_flow_match_eval(c):
    from diffusers import FlowMatchEulerDiscreteScheduler
    _sched_loop(c, FlowMatchEulerDiscreteScheduler(num_train_timesteps=100))


def sched_lcm_eval(c):
    from diffusers import LCMScheduler
    _sched_loop(c, LCMScheduler(num_train_timesteps=100))


def sched_kdpm2_eval(c):
    from diffusers import KDPM2DiscreteScheduler
    _sched_loop(c, KDPM2DiscreteScheduler(num_train_timesteps=100))


def sched_deis_eval(c):
    from diffusers import DEISMultistepScheduler
    _sched_loop(c, DEISMultistepScheduler(num_train_timesteps=100))


PROGRAMS = {name: Program(fn) for name, fn in list(globals().items())
            if callable(fn) and getattr(fn, "__module__", None) == __name__ and name.endswith(("_train", "_eval"))}

if __name__ == "__main__":
    main(PROGRAMS)
