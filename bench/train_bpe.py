#!/usr/bin/env python3
"""Trains a byte-level BPE tokenizer (GPT-2's and LLaMA-3's kind) of a given
vocabulary size on text files with HuggingFace `tokenizers`, and writes its
tokenizer.json: a LLaMA-3-sized vocabulary (128,256) for the embedding-cache
benchmark, where LLaMA-3's own tokenizer cannot be downloaded.

  train_bpe.py --vocab 128256 --out tokenizer.json TEXT...
"""
import argparse
import sys


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--vocab", type=int, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=args.vocab, min_frequency=1, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train(args.files, trainer)
    size = tokenizer.get_vocab_size()
    tokenizer.save(args.out)
    print(f"train_bpe: {size} tokens (asked {args.vocab}) -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
