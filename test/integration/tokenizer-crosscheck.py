#!/usr/bin/env python3
"""tpc-tokenize --tokenizer (tokenizer.json) and --sentencepiece (.model) against HuggingFace, live.

  tokenizer-crosscheck.py --tokenize BIN/tpc-tokenize --work WORK_DIR TEXT_FILE_OR_DIR...

Also a SentencePiece .model (BPE with byte fallback, made by spm_train)
through tpc-tokenize --sentencepiece, against the Python sentencepiece wheel
and transformers' LlamaTokenizer.

Trains byte-level BPE tokenizers of GPT-2's kind and of LLaMA-3's (its
split pattern, ignore_merges, a template adding BOS), and a SentencePiece
BPE as LLaMA-2's (U+2581 normalizer, byte fallback, BOS), with HuggingFace's
`tokenizers` (3000 tokens; special tokens "<|endoftext|>" and "<|pad|>", a
plain added token "<tpc>") on part of the text, saves each tokenizer.json,
and tokenises a corpus of several MB (the text files, a directory standing
for its *.md files and its files without an extension (the fortunes),
sorted; the tricky mixed-Unicode text of
bpe-crosscheck.py under eight seeds; each document followed by
"<|endoftext|>", with added tokens next to each other, inside words and cut
short) with both: every id must be equal, and decode must give back the
text. The merges are checked in both of the file's spellings ("a b" and
["a", "b"]). Then the one-line errors for a corrupt file and for a field
tpc does not read yet. Exits 1 at the first mismatch, naming its position.
"""
import argparse
import copy
import json
import struct
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
bpe_crosscheck = __import__("bpe-crosscheck")


def corpus(paths):
    documents = []
    for path in map(Path, paths):
        files = ([f for f in sorted(path.iterdir()) if f.is_file() and f.suffix in ("", ".md")]
                 if path.is_dir() else [path])
        documents += [f.read_text(encoding="utf-8", errors="replace") for f in files]
    documents += [bpe_crosscheck.tricky_text(seed, 20000) for seed in range(8)]
    # Added tokens between documents, back to back, inside a word, and
    # their prefixes, which are plain text.
    text = "<|endoftext|>".join(documents) + "</s>" + "</s>x</s></s>y".join(documents[:2])
    text += "a<|endoftext|><|endoftext|>b<|pad|><tpc>x<|endof <tpc <|endoftext|"
    # What LLaMA-3's pattern tells apart: contractions in any case (long s
    # folds to s), runs of digits cut in threes, line breaks after
    # punctuation, a leading symbol or space joined to letters.
    text += " ".join(["x'RE", "'ſa", "'Ll", "I'M", "1234567", "12\r\r\n", " !!\n\nx", "(hello",
                      "\u00a0hi", "\t\tx", "  \n  \n  y", "\u0663\u0664\u0665\u0666", "'", "''s"] * 50)
    return text


LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def train(text, path, kind):
    """A byte-level BPE as GPT-2's tokenizer.json has it, or as LLaMA-3's
    (its split pattern, ignore_merges, BOS added by a template)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    if kind == "sentencepiece":
        return train_sentencepiece(text, path)
    llama3 = kind == "llama3"
    tokenizer = Tokenizer(models.BPE(ignore_merges=llama3))
    if llama3:
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    else:
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|pad|>"] + (["<|begin_of_text|>"] if llama3 else [])
    trainer = trainers.BpeTrainer(
        vocab_size=3000, special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator([text[i:i + 4096] for i in range(0, len(text), 4096)], trainer)
    tokenizer.add_tokens(["<tpc>"])
    if llama3:
        bos = tokenizer.token_to_id("<|begin_of_text|>")
        tokenizer.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                          special_tokens=[("<|begin_of_text|>", bos)])])
    tokenizer.save(str(path))
    return tokenizer


def train_sentencepiece(text, path):
    """SentencePiece's BPE as LLaMA-2's tokenizer.json has it: U+2581 for
    spaces and in front (the normalizer), no pre-tokenizer, byte fallback to
    <0x00>..<0xFF> (vocabulary entries, not added tokens), BOS by a template.
    A small alphabet leaves rare characters to the byte fallback."""
    from tokenizers import Tokenizer, decoders, models, normalizers, processors, trainers

    tokenizer = Tokenizer(models.BPE(byte_fallback=True, fuse_unk=True, unk_token="<unk>"))
    tokenizer.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"),
                                                 normalizers.Replace(" ", "\u2581")])
    tokenizer.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(),
                                           decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    trainer = trainers.BpeTrainer(vocab_size=3000, special_tokens=["<unk>", "<s>", "</s>"],
                                  limit_alphabet=150, show_progress=False)
    tokenizer.train_from_iterator([text[i:i + 1024] for i in range(0, len(text), 1024)], trainer)
    data = json.loads(tokenizer.to_str())
    vocab = data["model"]["vocab"]
    for b in range(256):
        vocab.setdefault(f"<0x{b:02X}>", len(vocab))
    data["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                 {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [vocab["<s>"]], "tokens": ["<s>"]}}}
    Path(path).write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return Tokenizer.from_file(str(path))


def tpc_ids(tokenize, tokenizer_json, text_path, out):
    result = subprocess.run([tokenize, str(text_path), "-o", str(out), "--tokenizer", str(tokenizer_json)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"tokenizer-crosscheck: tpc-tokenize failed: {result.stderr.strip()}")
    return bpe_crosscheck.read_tokens(out)


def tpc_decode(tokenize, tokenizer_args, ids, work, name):
    """tpc-tokenize --decode of `ids` (written as a token file)."""
    tokens, out = work / f"{name}-decode.tokens", work / f"{name}-decode.txt"
    tokens.write_bytes(b"TPCTOKv1" + struct.pack("<Q", len(ids)) + struct.pack(f"<{len(ids)}I", *ids))
    result = subprocess.run([tokenize, "--decode", str(tokens), "-o", str(out)] + tokenizer_args,
                            capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"tokenizer-crosscheck: tpc-tokenize --decode failed: {result.stderr.strip()}")
    return out.read_bytes().decode("utf-8", errors="surrogateescape")


def compare(name, expected, actual, what="tokens"):
    """Token ids, or (what="characters") decoded texts: equal, or exit
    naming the first difference."""
    if expected == actual:
        print(f"{name}: {len(actual)} {what} identical")
        return
    at = next((i for i, (a, b) in enumerate(zip(expected, actual)) if a != b), min(len(expected), len(actual)))
    span = 20 if what == "characters" else 5
    sys.exit(f"tokenizer-crosscheck: {name}: {what} differ from {at} on: HF {expected[at:at + span]!r}, "
             f"tpc {actual[at:at + span]!r} ({len(expected)} against {len(actual)} {what})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokenize", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("texts", nargs="+")
    args = parser.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)

    text = corpus(args.texts)
    text_path = work / "corpus.txt"
    text_path.write_bytes(text.encode("utf-8"))
    size = text_path.stat().st_size
    if size < 3_000_000:
        sys.exit(f"tokenizer-crosscheck: the corpus has only {size} bytes")
    for kind in ("gpt2", "llama3", "sentencepiece"):
        tokenizer_json = work / f"tokenizer-{kind}.json"
        hf = train(text[: len(text) // 4], tokenizer_json, kind)
        expected = hf.encode(text).ids
        print(f"{kind}: corpus {size} bytes; HF tokenizers: {len(expected)} tokens, vocab {hf.get_vocab_size()}")
        for token in (("</s>",) if kind == "sentencepiece" else ("<|endoftext|>", "<|pad|>", "<tpc>")):
            if hf.token_to_id(token) not in expected:
                sys.exit(f"tokenizer-crosscheck: the corpus never yields {token}")

        actual = tpc_ids(args.tokenize, tokenizer_json, text_path, work / f"{kind}.tokens")
        compare(f"{kind} tokenizer.json", expected, actual)
        # tpc's decode (generation prints it) is HF's, with and without the
        # BOS in front (SentencePiece's decoder strips the space its
        # normalizer put before the first piece).
        for name, ids in (("all", actual), ("no-bos", actual[1:])):
            compare(f"{kind} decode ({name})", hf.decode(ids, skip_special_tokens=False),
                    tpc_decode(args.tokenize, ["--tokenizer", str(tokenizer_json)], ids, work, f"{kind}-{name}"),
                    "characters")
        if kind == "sentencepiece":
            fallback = sum(1 for i in actual if hf.id_to_token(i).startswith("<0x"))
            print(f"  {fallback} byte-fallback tokens")
            if not fallback:
                sys.exit("tokenizer-crosscheck: the corpus never falls back to bytes")
        else:
            bos = "<|begin_of_text|>" if kind == "llama3" else ""
            if hf.decode(actual, skip_special_tokens=False) != bos + text:
                sys.exit(f"tokenizer-crosscheck: {kind}: HF's decode of tpc's ids is not the text")

        # The other spelling of the merges.
        data = json.loads(tokenizer_json.read_text(encoding="utf-8"))
        merges = data["model"]["merges"]
        other = copy.deepcopy(data)
        other["model"]["merges"] = [m.split(" ") if isinstance(m, str) else " ".join(m) for m in merges]
        other_path = work / f"tokenizer-{kind}-other-merges.json"
        other_path.write_text(json.dumps(other), encoding="utf-8")
        compare(f"{kind} merges spelt " + ("as pairs" if isinstance(merges[0], str) else "as strings"),
                expected, tpc_ids(args.tokenize, other_path, text_path, work / f"{kind}-other.tokens"))

    # A SentencePiece .model (spm_train, Debian's sentencepiece) read through
    # libsentencepiece, against the Python sentencepiece wheel (its own
    # build) and transformers' LlamaTokenizer; the text without the
    # special-token spellings, which LlamaTokenizer alone would split on
    # (its BOS, EOS and unknown token: the docs may write `<s>`).
    plain = text
    for special in ("<s>", "</s>", "<unk>"):
        plain = plain.replace(special, " ")
    plain_path = work / "plain.txt"
    plain_path.write_bytes(plain.encode("utf-8"))
    train_text = work / "spm-train.txt"
    train_text.write_text("\n".join(line for line in plain[: len(plain) // 4].splitlines() if line.strip()),
                          encoding="utf-8")
    result = subprocess.run(["spm_train", f"--input={train_text}", f"--model_prefix={work / 'spm'}",
                             "--vocab_size=2000", "--model_type=bpe", "--byte_fallback=true",
                             "--character_coverage=0.995", "--num_threads=2"], capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"tokenizer-crosscheck: spm_train failed: {result.stderr[-500:]}")
    model = work / "spm.model"
    import sentencepiece
    from transformers import LlamaTokenizer
    processor = sentencepiece.SentencePieceProcessor(model_file=str(model))
    expected = [processor.bos_id()] + processor.encode(plain)
    result = subprocess.run([args.tokenize, str(plain_path), "-o", str(work / "spm.tokens"),
                             "--sentencepiece", str(model)], capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"tokenizer-crosscheck: tpc-tokenize --sentencepiece failed: {result.stderr.strip()}")
    actual = bpe_crosscheck.read_tokens(work / "spm.tokens")
    compare(f"sentencepiece .model (python sentencepiece {sentencepiece.__version__})", expected, actual)
    fallback = sum(1 for i in actual if processor.is_byte(i))
    if not fallback:
        sys.exit("tokenizer-crosscheck: the .model never falls back to bytes")
    print(f"  {fallback} byte-fallback tokens")
    llama = LlamaTokenizer(vocab_file=str(model), legacy=True)
    compare("sentencepiece .model (transformers LlamaTokenizer)", llama(plain).input_ids, actual)
    compare("sentencepiece .model decode", processor.decode(actual),
            tpc_decode(args.tokenize, ["--sentencepiece", str(model)], actual, work, "spm"), "characters")

    # One-line errors.
    broken = work / "broken.json"
    broken.write_text(tokenizer_json.read_text(encoding="utf-8")[:1000], encoding="utf-8")
    data = json.loads((work / "tokenizer-gpt2.json").read_text(encoding="utf-8"))
    normalized = copy.deepcopy(data)
    normalized["normalizer"] = {"type": "NFC"}
    normalized_path = work / "normalizer.json"
    normalized_path.write_text(json.dumps(normalized), encoding="utf-8")
    result = subprocess.run([args.tokenize, str(text_path), "-o", str(work / "x.tokens"),
                             "--sentencepiece", str(broken)], capture_output=True, text=True)
    if result.returncode == 0 or "broken.json: not a SentencePiece model" not in result.stderr:
        sys.exit(f"tokenizer-crosscheck: --sentencepiece on a JSON file: {result.stderr!r}")
    for path, message in ((broken, "not a JSON object (tokenizer.json)"),
                          (normalized_path, "normalizer is set; byte-level BPE (GPT-2's, LLaMA-3's) has none")):
        result = subprocess.run([args.tokenize, str(text_path), "-o", str(work / "x.tokens"),
                                 "--tokenizer", str(path)], capture_output=True, text=True)
        lines = result.stderr.strip().splitlines()
        if result.returncode == 0 or len(lines) != 1 or message not in lines[0]:
            sys.exit(f"tokenizer-crosscheck: {path.name}: expected one error line with "
                     f"{message!r}, got rc {result.returncode}: {result.stderr!r}")
    if (work / "x.tokens").exists():
        sys.exit("tokenizer-crosscheck: a failed run left an output file")
    print("errors: corrupt file and unsupported normalizer, one line each")


if __name__ == "__main__":
    main()
