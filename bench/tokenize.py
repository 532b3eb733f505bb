"""`trident prepare` against the `tokenizers` library on the same corpus,
tokenizer and thread count, measured in the same run (bench/tokenize.sh).

Trains a byte-level BPE (LLaMA-3 split pattern, vocabulary VOCAB) on the
corpus, writes the corpus as JSONL (SCALE copies of its paragraphs, each
copy's words shuffled so that it is new text, not a cache hit), then for
each thread count N:
  reference: Tokenizer.encode_batch over all documents (already in memory:
             no reading, no JSON, no writing) with RAYON_NUM_THREADS=N
  trident:   trident prepare --workers N (reads the JSONL, encodes, writes
             the .bin/.idx), wall time of the whole command
and prints tokens/s per core of each and their ratio. Then the peak resident
memory of prepare on the corpus and on one 4 times larger (bounded memory).
    tokenize.py TRIDENT CORPUS.txt WORK [SCALE] [VOCAB]
"""
import json
import os
import random
import resource
import subprocess
import sys
import time

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
          r"\s*[\r\n]+|\s+(?!\S)|\s+")


def main():
    trident, corpus, work = sys.argv[1:4]
    scale = int(sys.argv[4]) if len(sys.argv) > 4 else 8
    vocab = int(sys.argv[5]) if len(sys.argv) > 5 else 8000
    os.makedirs(work, exist_ok=True)
    with open(corpus, encoding="utf-8") as f:
        paragraphs = [p for p in f.read().split("\n\n") if p.strip()]
    rng = random.Random(1)
    docs = []
    for copy in range(scale):
        for p in paragraphs:
            words = p.split(" ")
            if copy:
                rng.shuffle(words)
            docs.append(" ".join(words))
    jsonl = os.path.join(work, "corpus.jsonl")
    with open(jsonl, "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps({"text": d}) + "\n")
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated"),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.train([corpus], trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<|end_of_text|>"],
                                            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    tok_path = os.path.join(work, "tokenizer.json")
    tok.save(tok_path)
    mb = os.path.getsize(jsonl) / 1e6
    print(f"corpus: {len(docs)} documents, {mb:.1f} MB JSONL; byte-level BPE, vocabulary {vocab}, LLaMA-3 pattern")
    print(f"{'threads':>7} | {'tokenizers tok/s/core':>22} | {'trident tok/s/core':>19} | ratio")
    cores = os.cpu_count()
    for n in sorted({1, cores}):
        env = dict(os.environ, RAYON_NUM_THREADS=str(n), TOKENIZERS_PARALLELISM="true")
        ref_code = (f"import time; from tokenizers import Tokenizer; import json\n"
                    f"docs=[json.loads(l)['text'] for l in open({jsonl!r})]\n"
                    f"t=Tokenizer.from_file({tok_path!r}); t.encode_batch(docs[:200])\n"
                    f"s=time.perf_counter(); e=t.encode_batch(docs); d=time.perf_counter()-s\n"
                    f"print(sum(len(x.ids)+1 for x in e), d)")
        out = subprocess.run([sys.executable, "-c", ref_code], env=env, capture_output=True, text=True, check=True)
        ref_tokens, ref_s = out.stdout.split()
        ref_rate = int(ref_tokens) / float(ref_s) / n
        start = time.perf_counter()
        subprocess.run([trident, "prepare", "--input", jsonl, "--out", os.path.join(work, "ds"), "--tokenizer",
                        tok_path, "--workers", str(n), "--valid-fraction", "0.01", "--force"], check=True,
                       capture_output=True)
        tri_s = time.perf_counter() - start
        with open(os.path.join(work, "ds.meta.json")) as f:
            meta = json.load(f)
        tri_tokens = meta["splits"]["train"]["tokens"] + meta["splits"]["valid"]["tokens"]
        if tri_tokens != int(ref_tokens):
            sys.exit(f"token counts differ: trident {tri_tokens}, tokenizers {ref_tokens}")
        tri_rate = tri_tokens / tri_s / n
        print(f"{n:>7} | {ref_rate:>22,.0f} | {tri_rate:>19,.0f} | {tri_rate / ref_rate:.2f}x")
    # bounded memory: peak RSS of prepare on the corpus and on 4 copies of it
    for copies in (1, 4):
        big = os.path.join(work, f"x{copies}.jsonl")
        with open(big, "w") as out, open(jsonl) as src:
            text = src.read()
            for _ in range(copies):
                out.write(text)
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        p = subprocess.Popen(["/usr/bin/time", "-f", "%M", trident, "prepare", "--input", big, "--out",
                              os.path.join(work, f"m{copies}"), "--tokenizer", tok_path, "--workers", str(cores), "--force"],
                             stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        _, err = p.communicate()
        rss_kb = int(err.strip().splitlines()[-1])
        print(f"peak resident memory of prepare on {os.path.getsize(big) / 1e6:.0f} MB: {rss_kb / 1024:.1f} MiB")


if __name__ == "__main__":
    main()
