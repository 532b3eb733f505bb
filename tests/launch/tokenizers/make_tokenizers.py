"""Trains the small tokenizers the tokenizer tests use (no downloads): a
byte-level BPE with the GPT-2 pre-tokenizer, one with the LLaMA-3 split
pattern (BOS template, ignore_merges), one Qwen-style (NFC + its pattern), and
SentencePiece BPE and unigram models with byte fallback.
    make_tokenizers.py CORPUS.txt STRESS.txt OUT_DIR
"""
import os
import sys

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
import sentencepiece as spm

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
          r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
        r"\s*[\r\n]+|\s+(?!\S)|\s+")


def byte_level(files, out, style):
    if style == "llama3":
        tok = Tokenizer(models.BPE(ignore_merges=True))
        specials = ["<|begin_of_text|>", "<|end_of_text|>"]
        pre = [pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated"), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
        tok.pre_tokenizer = pre_tokenizers.Sequence(pre)
    elif style == "qwen":
        tok = Tokenizer(models.BPE())
        specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
        tok.normalizer = normalizers.NFC()
        pre = [pre_tokenizers.Split(Regex(QWEN), behavior="isolated"), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
        tok.pre_tokenizer = pre_tokenizers.Sequence(pre)
    else:
        tok = Tokenizer(models.BPE())
        specials = ["<|endoftext|>"]
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1200, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train(files, trainer)
    if style == "llama3":
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                                          special_tokens=[("<|begin_of_text|>", bos)])])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.save(out)


def main():
    corpus, stress, out = sys.argv[1:4]
    os.makedirs(out, exist_ok=True)
    for style in ("gpt2", "llama3", "qwen"):
        byte_level([corpus, stress], os.path.join(out, f"{style}.json"), style)
    for kind in ("bpe", "unigram"):
        spm.SentencePieceTrainer.train(input=f"{corpus},{stress}", model_prefix=os.path.join(out, f"sp_{kind}"),
                                       vocab_size=800, model_type=kind, byte_fallback=True, character_coverage=0.9995,
                                       minloglevel=2, bos_id=1, eos_id=2, unk_id=0, pad_id=-1)


if __name__ == "__main__":
    main()
