"""Train an image classifier on one GPU with synthetic data: ResNet-50 or ViT-B/16.

The usual recipes: ResNet-50 in channels_last with SGD (momentum 0.9, weight decay 1e-4),
ViT-B/16 with fused AdamW; both under bf16 autocast. One random batch lives on the GPU (as
synthetic-data benchmarks do), so a step is forward, backward and optimizer only.

  python vision_single.py                                  # small images, seconds on a CPU
  python vision_single.py --model resnet50 --batch-size 64 --image-size 224
  python vision_single.py --model vit-b16 --batch-size 64 --compile
"""

import argparse

import torch
from torch.nn import functional as F

from train_utils import StepTimer, init_single
from vision_models import VISION_MODELS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(VISION_MODELS), default="resnet50")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--image-size", type=int, default=64, help="224 for the real recipe")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--compile", action="store_true", help="torch.compile the model")
    parser.add_argument("--seed", type=int, default=1337)
    args = parser.parse_args()
    launch = init_single()
    device = launch.device
    torch.manual_seed(args.seed)
    on_gpu = device.type == "cuda"
    if on_gpu:
        torch.backends.cudnn.benchmark = True
    model_kwargs = {"image": args.image_size} if args.model == "vit-b16" else {}
    model = VISION_MODELS[args.model](**model_kwargs).to(device)
    layout = torch.channels_last if args.model == "resnet50" else torch.contiguous_format
    model = model.to(memory_format=layout)
    print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters on {device}",
          flush=True)
    if args.model == "resnet50":
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    else:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05,
                                      fused=on_gpu)
    step_fn = torch.compile(model) if args.compile else model
    images = torch.randn(args.batch_size, 3, args.image_size, args.image_size,
                         device=device).to(memory_format=layout)
    labels = torch.randint(0, 1000, (args.batch_size,), device=device)
    dtype = torch.bfloat16 if on_gpu else torch.float32
    timer = StepTimer(device)
    for step in range(args.steps):
        timer.start()
        with torch.autocast(device.type, dtype=dtype, enabled=on_gpu):
            loss = F.cross_entropy(step_fn(images), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        wall_ms, gpu_ms = timer.stop()
        gpu = f" (gpu {gpu_ms:.2f} ms)" if gpu_ms is not None else ""
        print(f"step {step + 1}/{args.steps} | loss {loss.item():.4f} | {wall_ms:.2f} ms{gpu} | "
              f"{args.batch_size / (wall_ms / 1e3):,.0f} img/s", flush=True)
    if on_gpu:
        print(f"rank 0: max_memory_allocated "
              f"{torch.cuda.max_memory_allocated(device) / 2**30:.3f} GiB", flush=True)
        print(f"rank 0: max_memory_reserved "
              f"{torch.cuda.max_memory_reserved(device) / 2**30:.3f} GiB", flush=True)


if __name__ == "__main__":
    main()
