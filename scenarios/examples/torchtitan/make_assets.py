"""Writes the small tokenizer and text corpus TorchTitan's bundled configs read (``assets/``):
TorchTitan loads a Hugging Face tokenizer and a dataset from disk before it trains, and a
simulated step does not depend on which tokens it sees, only on how many.

The corpus is seeded random words (the same every run); the tokenizer is a byte-level BPE
trained on it with the Llama 3 special tokens TorchTitan looks for. Rerun after changing
either: ``python scenarios/examples/torchtitan/make_assets.py``.
"""

import json
import random
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

ASSETS = Path(__file__).resolve().parent / "assets"
WORDS = ("the quick brown fox jumps over lazy dog gpu cluster network training model data "
         "simulation kernel collective tensor pipeline stage expert router token batch step "
         "gradient optimizer shard replica host link switch packet flow rank").split()
DOCUMENTS = 100
WORDS_PER_DOCUMENT = 200
VOCAB_SIZE = 512  # below the debug model's 2048 embeddings; any flavour's vocabulary fits
BOS, EOS = "<|begin_of_text|>", "<|end_of_text|>"


def corpus(seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choices(WORDS, k=WORDS_PER_DOCUMENT)) for _ in range(DOCUMENTS)]


def tokenizer_for(texts: list[str]) -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=True)
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=[BOS, EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(texts, trainer)
    return tokenizer


def main() -> None:
    texts = corpus()
    (ASSETS / "text").mkdir(parents=True, exist_ok=True)
    (ASSETS / "tokenizer").mkdir(parents=True, exist_ok=True)
    with open(ASSETS / "text" / "data.json", "w") as f:
        for text in texts:
            f.write(json.dumps({"text": text}) + "\n")
    tokenizer_for(texts).save(str(ASSETS / "tokenizer" / "tokenizer.json"))
    config = {"bos_token": BOS, "eos_token": EOS, "add_bos_token": True, "add_eos_token": True,
              "model_max_length": 131072, "tokenizer_class": "PreTrainedTokenizerFast"}
    (ASSETS / "tokenizer" / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")


if __name__ == "__main__":
    main()
