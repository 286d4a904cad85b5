"""Train a public model as its users do: Hugging Face transformers, timm, diffusers or a plain
``torch.nn`` LSTM, built from its config (random weights, random data, no downloads), with the
default optimizer.

One plain training loop for every model (``torch.optim.AdamW`` with its defaults, bf16 autocast,
``loss.backward()``, ``optimizer.step()``, ``zero_grad()``), or the library's own loop:
``--loop trainer`` runs ``transformers.Trainer`` (which drives ``accelerate``), ``--loop accelerate``
an ``accelerate.Accelerator`` (DDP when launched on several ranks, as ``torchrun`` or
``accelerate launch`` does). The same script runs on a real GPU and, unmodified, on phantora-ns3's
simulated GPUs. Rank 0 prints one line per step, ``step i/N | loss L | T ms``, timed between two
``torch.cuda.synchronize()`` calls.

  python3 zoo_train.py --model hf-llama --steps 8            # one GPU
  torchrun --nproc_per_node 2 zoo_train.py --model hf-bert --loop accelerate
  python3 zoo_train.py --list                                 # the models and their sizes
"""

import argparse
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

Batch = dict[str, torch.Tensor]


@dataclass(frozen=True)
class Entry:
    """A model of the zoo at one size: how to build it, one random batch, and its loss."""

    build: Callable[[], nn.Module]
    batch: Callable[[torch.device], Batch]
    loss: Callable[[nn.Module, Batch], torch.Tensor]
    about: str


def hf_loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    """A Hugging Face model given ``labels`` returns its own training loss."""
    return model(**batch).loss


def classifier_loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    return F.cross_entropy(model(batch["pixel_values"]), batch["labels"])


def unet_loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    """A diffusion model's training objective: predict the noise added to the latents."""
    predicted = model(batch["noisy"], batch["timestep"],
                      encoder_hidden_states=batch["text"]).sample
    return F.mse_loss(predicted.float(), batch["noise"].float())


def tokens(batch: int, seq: int, vocab: int, device: torch.device) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, seq), device=device)


def causal_lm(config_name: str, batch: int, seq: int, about: str, dtype: torch.dtype | None = None,
              **config: Any) -> Entry:
    """A decoder-only language model of transformers (``labels`` = the inputs, shifted inside),
    its weights in ``dtype`` (default fp32 under bf16 autocast)."""
    def build() -> nn.Module:
        import transformers
        return transformers.AutoModelForCausalLM.from_config(
            getattr(transformers, config_name)(**config), dtype=dtype)

    def make(device: torch.device) -> Batch:
        ids = tokens(batch, seq, config["vocab_size"], device)
        return {"input_ids": ids, "labels": ids}
    return Entry(build, make, hf_loss, f"{about}, batch {batch}")


def masked_lm(batch: int, seq: int, about: str, **config: Any) -> Entry:
    def build() -> nn.Module:
        import transformers
        return transformers.BertForMaskedLM(transformers.BertConfig(**config))

    def make(device: torch.device) -> Batch:
        ids = tokens(batch, seq, config.get("vocab_size", 30522), device)
        return {"input_ids": ids, "labels": ids}
    return Entry(build, make, hf_loss, f"{about}, batch {batch}")


def seq2seq(batch: int, seq: int, target: int, about: str, **config: Any) -> Entry:
    """T5 (the token ids its released configs set: padding 0 also starts the decoder)."""
    def build() -> nn.Module:
        import transformers
        return transformers.T5ForConditionalGeneration(transformers.T5Config(
            pad_token_id=0, eos_token_id=1, decoder_start_token_id=0, **config))

    def make(device: torch.device) -> Batch:
        vocab = config.get("vocab_size", 32128)
        return {"input_ids": tokens(batch, seq, vocab, device),
                "labels": tokens(batch, target, vocab, device)}
    return Entry(build, make, hf_loss, f"{about}, batch {batch}")


def speech(batch: int, target: int, about: str, **config: Any) -> Entry:
    def build() -> nn.Module:
        import transformers
        return transformers.WhisperForConditionalGeneration(transformers.WhisperConfig(**config))

    def make(device: torch.device) -> Batch:
        frames = 2 * config["max_source_positions"]  # the encoder's two convolutions halve them
        return {"input_features": torch.randn(batch, config["num_mel_bins"], frames, device=device),
                "labels": tokens(batch, target, config["vocab_size"], device)}
    return Entry(build, make, hf_loss, f"{about}, batch {batch}")


def hf_vit(batch: int, about: str, **config: Any) -> Entry:
    def build() -> nn.Module:
        import transformers
        return transformers.ViTForImageClassification(transformers.ViTConfig(**config))

    def make(device: torch.device) -> Batch:
        size = config.get("image_size", 224)
        return {"pixel_values": torch.randn(batch, 3, size, size, device=device),
                "labels": torch.randint(0, config.get("num_labels", 2), (batch,), device=device)}
    return Entry(build, make, hf_loss, f"{about}, batch {batch}")


def timm_model(name: str, batch: int, image: int, about: str, **kwargs: Any) -> Entry:
    def build() -> nn.Module:
        import timm
        return timm.create_model(name, pretrained=False, num_classes=1000, **kwargs)

    def make(device: torch.device) -> Batch:
        return {"pixel_values": torch.randn(batch, 3, image, image, device=device),
                "labels": torch.randint(0, 1000, (batch,), device=device)}
    return Entry(build, make, classifier_loss, f"{about}, batch {batch}")


def unet(batch: int, latent: int, text: int, about: str, **config: Any) -> Entry:
    def build() -> nn.Module:
        import diffusers
        return diffusers.UNet2DConditionModel(**config)

    def make(device: torch.device) -> Batch:
        shape = (batch, config.get("in_channels", 4), latent, latent)
        return {"noisy": torch.randn(shape, device=device), "noise": torch.randn(shape, device=device),
                "timestep": torch.randint(0, 1000, (batch,), device=device),
                "text": torch.randn(batch, text, config["cross_attention_dim"], device=device)}
    return Entry(build, make, unet_loss, f"{about}, batch {batch}")


class LstmLanguageModel(nn.Module):
    """A word-level LSTM language model, as PyTorch's ``word_language_model`` example builds it:
    embedding, dropout, a stacked ``nn.LSTM``, dropout, a linear decoder over the vocabulary."""

    def __init__(self, vocab: int, width: int, layers: int, dropout: float = 0.2) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.drop = nn.Dropout(dropout)
        self.lstm = nn.LSTM(width, width, layers, batch_first=True)
        self.decoder = nn.Linear(width, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        hidden, _ = self.lstm(self.drop(self.embed(ids)))
        return self.decoder(self.drop(hidden))


def lstm_lm(batch: int, seq: int, about: str, vocab: int, width: int, layers: int) -> Entry:
    def make(device: torch.device) -> Batch:
        return {"input_ids": tokens(batch, seq, vocab, device),
                "labels": tokens(batch, seq, vocab, device)}

    def loss(model: nn.Module, batch_: Batch) -> torch.Tensor:
        logits = model(batch_["input_ids"])
        return F.cross_entropy(logits.flatten(0, 1).float(), batch_["labels"].flatten())
    return Entry(lambda: LstmLanguageModel(vocab, width, layers), make, loss,
                 f"{about}, batch {batch}")


LLAMA = dict(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
             num_attention_heads=16, num_key_value_heads=8, max_position_embeddings=2048)
TINY_LM = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
WHISPER_BASE = dict(vocab_size=51865, d_model=512, encoder_layers=6, decoder_layers=6,
                    encoder_attention_heads=8, decoder_attention_heads=8, encoder_ffn_dim=2048,
                    decoder_ffn_dim=2048, num_mel_bins=80, max_source_positions=1500,
                    max_target_positions=448)
SD_UNET_SMALL = dict(sample_size=32, in_channels=4, out_channels=4, layers_per_block=2,
                     block_out_channels=(128, 256, 512, 512), cross_attention_dim=512,
                     attention_head_dim=8)

ZOO: dict[str, dict[str, Entry]] = {
    "hf-llama": {
        "full": causal_lm("LlamaConfig", 8, 1024, "Llama, 8 layers of 1024, GQA 16/8 heads, "
                          "seq 1024 (~170M)", **LLAMA),
        "ci": causal_lm("LlamaConfig", 2, 32, "Llama, 2 layers of 64", **TINY_LM)},
    "hf-qwen2": {
        "full": causal_lm("Qwen2Config", 8, 1024, "Qwen2, 8 layers of 1024, GQA 16/2 heads, "
                          "seq 1024", **{**LLAMA, "num_key_value_heads": 2, "vocab_size": 32768}),
        "ci": causal_lm("Qwen2Config", 2, 32, "Qwen2, 2 layers of 64", **TINY_LM)},
    "hf-mixtral": {
        # bf16 weights, as Mixtral is loaded for training: its experts' grouped GEMMs take bf16
        "full": causal_lm("MixtralConfig", 4, 1024, "Mixtral, 4 layers of 1024, 8 experts top-2, "
                          "seq 1024, bf16 weights", torch.bfloat16, **{**LLAMA, "num_hidden_layers": 4,
                                         "intermediate_size": 1792, "num_local_experts": 8,
                                         "num_experts_per_tok": 2}),
        "ci": causal_lm("MixtralConfig", 2, 32, "Mixtral, 2 layers of 64, 4 experts top-2, bf16",
                        torch.bfloat16, **TINY_LM, num_local_experts=4, num_experts_per_tok=2)},
    "hf-bert": {
        "full": masked_lm(16, 512, "BERT-base masked LM, seq 512"),
        "ci": masked_lm(2, 32, "BERT, 2 layers of 64", vocab_size=512, hidden_size=64,
                        num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)},
    "hf-t5": {
        "full": seq2seq(16, 512, 128, "T5-small, 512 source and 128 target tokens"),
        "ci": seq2seq(2, 32, 16, "T5, 2 layers of 64", vocab_size=512, d_model=64, d_kv=16,
                      d_ff=128, num_layers=2, num_heads=4)},
    "hf-vit": {
        "full": hf_vit(32, "ViT-B/16, 224 px", num_labels=1000),
        "ci": hf_vit(2, "ViT, 2 layers of 64, 32 px", hidden_size=64, num_hidden_layers=2,
                     num_attention_heads=4, intermediate_size=128, image_size=32, patch_size=8,
                     num_labels=10)},
    "hf-whisper": {
        "full": speech(8, 128, "Whisper-base, 30 s of audio, 128 target tokens", **WHISPER_BASE),
        "ci": speech(2, 16, "Whisper, 1+1 layers of 64, 2 s of audio", vocab_size=512,
                     d_model=64, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
                     decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
                     num_mel_bins=80, max_source_positions=100, max_target_positions=64,
                     pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)},
    "timm-vit": {
        "full": timm_model("vit_base_patch16_224", 32, 224, "timm ViT-B/16, 224 px"),
        "ci": timm_model("vit_tiny_patch16_224", 2, 32, "timm ViT-Ti/16, 32 px", img_size=32)},
    "timm-convnext": {
        "full": timm_model("convnext_tiny", 64, 224, "timm ConvNeXt-T, 224 px"),
        "ci": timm_model("convnext_atto", 2, 32, "timm ConvNeXt-atto, 32 px")},
    "timm-efficientnet": {
        "full": timm_model("efficientnet_b0", 64, 224, "timm EfficientNet-B0, 224 px"),
        "ci": timm_model("efficientnet_b0", 2, 32, "timm EfficientNet-B0, 32 px")},
    "torch-lstm": {
        "full": lstm_lm(32, 128, "LSTM language model, 2 layers of 1024, seq 128", 32000, 1024, 2),
        "ci": lstm_lm(2, 16, "LSTM language model, 2 layers of 64", 512, 64, 2)},
    "diffusers-unet": {
        "full": unet(16, 32, 77, "diffusers UNet2DConditionModel (128-512 channels, "
                     "cross-attention), 32x32 latents", **SD_UNET_SMALL),
        "ci": unet(2, 8, 8, "diffusers UNet2DConditionModel, 32-64 channels, 8x8 latents",
                   sample_size=8, in_channels=4, out_channels=4, layers_per_block=1,
                   block_out_channels=(32, 64), cross_attention_dim=32, attention_head_dim=8,
                   down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                   up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), norm_num_groups=8)},
}
"""Every model at its ``full`` size (what the real runs measure) and a ``ci`` size (seconds)."""


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--model", choices=sorted(ZOO), default="hf-llama")
    parser.add_argument("--size", choices=("full", "ci"), default="full")
    parser.add_argument("--loop", choices=("plain", "trainer", "accelerate"), default="plain")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--list", action="store_true", help="print the models and exit")
    return parser.parse_args()


def print_step(step: int, steps: int, loss: float, seconds: float) -> None:
    print(f"step {step}/{steps} | loss {loss:.4f} | {seconds * 1e3:.2f} ms", flush=True)


def print_end(step_ms: list[float]) -> None:
    if len(step_ms) > 1:
        print(f"mean of steps 2-{len(step_ms)}: {sum(step_ms[1:]) / len(step_ms[1:]):.2f} ms/step",
              flush=True)
    if torch.cuda.is_available():
        print(f"rank {int(os.environ.get('RANK', 0))}: max_memory_allocated "
              f"{torch.cuda.max_memory_allocated() / 2**30:.3f} GiB", flush=True)


def train_plain(entry: Entry, model: nn.Module, device: torch.device, steps: int,
                lr: float) -> list[float]:
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    batch = entry.batch(device)
    step_ms = []
    for step in range(1, steps + 1):
        torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = entry.loss(model, batch)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        step_ms.append(seconds * 1e3)
        print_step(step, steps, loss.item(), seconds)
    return step_ms


def train_accelerate(entry: Entry, model: nn.Module, steps: int, lr: float) -> list[float]:
    """``accelerate``'s loop: it wraps the model (DDP on several ranks) and runs autocast."""
    from accelerate import Accelerator
    accelerator = Accelerator(mixed_precision="bf16")
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    model, optimizer = accelerator.prepare(model, optimizer)
    batch = entry.batch(accelerator.device)
    step_ms = []
    for step in range(1, steps + 1):
        torch.cuda.synchronize()
        start = time.perf_counter()
        with accelerator.autocast():
            loss = entry.loss(model, batch)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        step_ms.append(seconds * 1e3)
        if accelerator.is_main_process:
            print_step(step, steps, loss.item(), seconds)
    return step_ms


def train_trainer(entry: Entry, model: nn.Module, steps: int, lr: float) -> list[float]:
    """``transformers.Trainer`` on a dataset of one repeated random batch, its default optimizer;
    a callback times each step as the plain loop does."""
    import tempfile
    import transformers

    device = torch.device("cuda")
    batch = {key: value.cpu() for key, value in entry.batch(device).items()}
    size = len(next(iter(batch.values())))

    class Repeated(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return size * steps

        def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
            return {key: value[index % size] for key, value in batch.items()}

    step_ms: list[float] = []

    class StepTimer(transformers.TrainerCallback):
        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            torch.cuda.synchronize()
            self.start = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            torch.cuda.synchronize()
            seconds = time.perf_counter() - self.start
            step_ms.append(seconds * 1e3)
            if state.is_world_process_zero:
                print_step(state.global_step, steps, math.nan, seconds)

    with tempfile.TemporaryDirectory() as out:
        arguments = transformers.TrainingArguments(
            output_dir=out, per_device_train_batch_size=size, max_steps=steps, learning_rate=lr,
            bf16=True, report_to=[], save_strategy="no", logging_strategy="no",
            dataloader_num_workers=0, disable_tqdm=True)
        transformers.Trainer(model=model, args=arguments, train_dataset=Repeated(),
                             callbacks=[StepTimer()]).train()
    return step_ms


def main() -> None:
    args = parse_args()
    if args.list:
        for name, sizes in sorted(ZOO.items()):
            print(f"{name:20s} " + "; ".join(f"{size}: {entry.about}" for size, entry in sizes.items()))
        return
    torch.manual_seed(0)
    entry = ZOO[args.model][args.size]
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)
    model = entry.build()
    if int(os.environ.get("RANK", 0)) == 0:
        params = sum(p.numel() for p in model.parameters())
        print(f"{args.model} ({args.size}): {entry.about}; {params / 1e6:.1f}M parameters, "
              f"loop {args.loop}", flush=True)
    if args.loop == "trainer":
        step_ms = train_trainer(entry, model, args.steps, args.lr)
    elif args.loop == "accelerate":
        step_ms = train_accelerate(entry, model, args.steps, args.lr)
    else:
        step_ms = train_plain(entry, model.to(device), device, args.steps, args.lr)
    if int(os.environ.get("RANK", 0)) == 0:
        print_end(step_ms)


if __name__ == "__main__":
    main()
