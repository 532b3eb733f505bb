"""Trident's tokenizers against the reference libraries (ctest: tokenizers).

Trains small tokenizers with `tokenizers` and `sentencepiece`
(make_tokenizers.py), writes a JSONL corpus (the paragraphs of the
Shakespeare text plus each line and paragraph of a stress text: emoji, CJK,
combining marks, runs of spaces and newlines, CRLF, digits, contractions,
special tokens inside text), compresses it with zstd (and gzip), runs
`trident prepare` on it and checks, for every document, that the ids in the
.bin/.idx equal the reference library's ids followed by the EOD token. Then
checks decoding (`prepare --inspect`) and that unsupported components are
refused naming their JSON path.
    check.py --trident BIN --root SRC --work DIR
"""
import argparse
import array
import gzip
import json
import os
import shutil
import struct
import subprocess
import sys

from tokenizers import Tokenizer
import sentencepiece as spm

HERE = os.path.dirname(os.path.abspath(__file__))


def read_dataset(prefix):
    with open(prefix + ".idx", "rb") as f:
        idx = f.read()
    assert idx[:9] == b"MMIDIDX\x00\x00", prefix
    code = idx[17]
    seqs, docs = struct.unpack_from("<QQ", idx, 18)
    sizes = struct.unpack_from(f"<{seqs}i", idx, 34)
    doc_index = struct.unpack_from(f"<{docs}q", idx, 34 + 12 * seqs)
    tokens = array.array({8: "H", 4: "i"}[code])
    with open(prefix + ".bin", "rb") as f:
        tokens.frombytes(f.read())
    out, pos = [], 0
    starts = [0]
    for s in sizes:
        starts.append(starts[-1] + s)
    for d in range(docs - 1):
        a, b = starts[doc_index[d]], starts[doc_index[d + 1]]
        out.append(list(tokens[a:b]))
    return out


def corpus_file(root, work):
    """The Shakespeare text beside the checkout, else the project's own docs."""
    for path in (os.environ.get("TRIDENT_CORPUS", ""), os.path.join(root, "../shared/data/tinyshakespeare.txt")):
        if path and os.path.exists(path):
            return path
    path = os.path.join(work, "docs_corpus.txt")
    with open(path, "w", encoding="utf-8") as out:
        for name in sorted(os.listdir(os.path.join(root, "docs"))):
            if not name.endswith(".md"):  # the docs' pages, not their images folder
                continue
            with open(os.path.join(root, "docs", name), encoding="utf-8") as f:
                out.write(f.read() + "\n\n")
    return path


def corpus(text_path):
    with open(text_path, encoding="utf-8") as f:
        text = f.read()
    with open(os.path.join(HERE, "stress.txt"), encoding="utf-8", newline="") as f:
        stress = f.read()
    docs = [p + "\n\n" for p in text.split("\n\n") if p.strip()]
    docs += [line for line in stress.split("\n")]
    docs += [stress, stress.replace("\n", "\r\n"), "   \n\n\n  x  \t\n", "a" * 3000 + " " * 700 + "🙂" * 50]
    # long pieces (the heap-ordered merge path): CJK without spaces, one long word
    docs += ["你好世界，日本語のテキスト한국어" * 400, "Supercalifragilisticexpialidocious" * 120,
             " ".join(c * n for c, n in (("l", 99), ("s", 101), ("e", 77), ("o", 55), ("t", 33), (" ", 65)))]
    return docs


def run(cmd, expect=0):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != expect:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {p.returncode}, expected {expect}\n{p.stdout}\n{p.stderr}")
    return p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trident", required=True)
    ap.add_argument("--root", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    work = a.work
    text_path = corpus_file(a.root, work)
    print(f"corpus: {text_path}")
    docs = corpus(text_path)
    run([sys.executable, os.path.join(HERE, "make_tokenizers.py"), text_path, os.path.join(HERE, "stress.txt"), work])

    jsonl = os.path.join(work, "corpus.jsonl")
    with open(jsonl, "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps({"text": d, "id": 1}, ensure_ascii=False) + "\n")
    inputs = {}
    if shutil.which("zstd"):
        run(["zstd", "-q", "-f", jsonl, "-o", jsonl + ".zst"])
        inputs["zst"] = jsonl + ".zst"
    with open(jsonl, "rb") as f, gzip.open(jsonl + ".gz", "wb") as g:
        g.write(f.read())
    inputs["gz"] = jsonl + ".gz"
    inputs["plain"] = jsonl

    failures = 0
    cases = [("gpt2.json", "hf"), ("llama3.json", "hf"), ("qwen.json", "hf"), ("sp_bpe.model", "sp"),
             ("sp_unigram.model", "sp")]
    for i, (name, kind) in enumerate(cases):
        path = os.path.join(work, name)
        src = list(inputs.values())[i % len(inputs)]
        prefix = os.path.join(work, "ds_" + name.split(".")[0])
        run([a.trident, "prepare", "--input", src, "--out", prefix, "--tokenizer", path, "--valid-fraction", "0",
             "--workers", "2"])
        got = read_dataset(prefix + "_train")
        if kind == "hf":
            ref = Tokenizer.from_file(path)
            eod = next(ref.token_to_id(t) for t in ("<|endoftext|>", "<|end_of_text|>") if ref.token_to_id(t) is not None)
            want = [e.ids + [eod] for e in ref.encode_batch(docs)]
            decode = lambda ids: ref.decode(ids, skip_special_tokens=False)
        else:
            ref = spm.SentencePieceProcessor(model_file=path)
            want = [ref.encode(d) + [ref.eos_id()] for d in docs]
            decode = lambda ids: ref.decode(ids)
        bad = [k for k in range(len(docs)) if k >= len(got) or got[k] != want[k]]
        # A unigram segmentation is the one with the highest summed piece score;
        # where two have exactly the same score, SentencePiece versions break the
        # tie differently (the library Trident links and the PyPI reference need
        # not be one version). Such a document counts when Trident's ids decode
        # to the same text with the same total score.
        ties = []
        if name == "sp_unigram.model":
            score = lambda ids: sum(ref.get_score(int(t)) for t in ids)
            ties = [k for k in bad if k < len(got) and decode(got[k]) == decode(want[k])
                    and abs(score(got[k]) - score(want[k])) <= 1e-4]
            bad = [k for k in bad if k not in ties]
        if len(got) != len(docs) or bad:
            failures += 1
            k = bad[0] if bad else 0
            print(f"FAIL {name}: {len(got)} documents (want {len(docs)}), {len(bad)} differ; first: {k} "
                  f"{docs[k][:60]!r}\n  trident   {got[k][:40] if k < len(got) else None}\n  reference {want[k][:40]}")
        else:
            same = "ids identical" + (f" except {len(ties)} with an equal-score segmentation, tie broken otherwise"
                                      if ties else "")
            print(f"ok   {name}: {len(docs)} documents, {sum(map(len, got))} tokens, {same} ({os.path.basename(src)})")
        # decoding: the first document through `prepare --inspect`
        out = run([a.trident, "prepare", "--inspect", prefix + "_train"]).stdout
        line = next(l for l in out.splitlines() if "first document" in l)
        shown = json.loads(line.split(": ", 1)[1])
        if shown != decode(want[0]):
            failures += 1
            print(f"FAIL {name}: decoded first document {shown!r} != reference {decode(want[0])!r}")

    # unsupported components are refused, naming their JSON path; nothing is written
    with open(os.path.join(work, "llama3.json"), encoding="utf-8") as f:
        tj = json.load(f)
    for mutate, path in [
            (lambda j: j["pre_tokenizer"]["pretokenizers"][1].update(type="Metaspace"), "$.pre_tokenizer.pretokenizers[1]"),
            (lambda j: j["model"].update(type="WordPiece"), "$.model.type"),
            (lambda j: j.update(normalizer={"type": "Lowercase"}), "$.normalizer"),
            (lambda j: j["added_tokens"][0].update(lstrip=True), "$.added_tokens[0].lstrip")]:
        bad_tok = json.loads(json.dumps(tj))
        mutate(bad_tok)
        bad_path = os.path.join(work, "unsupported.json")
        with open(bad_path, "w", encoding="utf-8") as f:
            json.dump(bad_tok, f)
        out_prefix = os.path.join(work, "refused")
        p = run([a.trident, "prepare", "--input", jsonl, "--out", out_prefix, "--tokenizer", bad_path], expect=2)
        left = [n for n in os.listdir(work) if n.startswith("refused")]
        if path not in p.stderr or left:
            failures += 1
            print(f"FAIL refusal {path}: stderr {p.stderr.strip()!r}, left behind {left}")
        else:
            print(f"ok   refused {path}")
    failures += end_to_end(a, work, text_path)
    if failures:
        sys.exit(f"{failures} failure(s)")
    print("tokenizers: all documents identical to the reference libraries; the whole path trains and samples")


def end_to_end(a, work, text_path):
    """corpus.jsonl.zst + tokenizer.json -> a LLaMA-style model on a weighted
    blend of two datasets with document masking -> sampled text."""
    failures = 0
    tok = os.path.join(work, "llama3.json")
    with open(text_path, encoding="utf-8") as f:
        paragraphs = [p for p in f.read().split("\n\n") if p.strip()]
    for name, docs in (("plays", paragraphs[: len(paragraphs) // 2]), ("more", paragraphs[len(paragraphs) // 2:])):
        src = os.path.join(work, f"{name}.jsonl")
        with open(src, "w", encoding="utf-8") as f:
            for d in docs:
                f.write(json.dumps({"text": d}) + "\n")
        if shutil.which("zstd"):
            run(["zstd", "-q", "-f", "--rm", src, "-o", src + ".zst"])
            src += ".zst"
        run([a.trident, "prepare", "--input", src, "--out", os.path.join(work, name), "--tokenizer", tok,
             "--workers", "2", "--valid-fraction", "0.05"])
    recipe = os.path.join(work, "blend.yaml")
    with open(recipe, "w") as f:
        f.write(f"""model: {{arch: llama, layers: 2, hidden: 64, heads: 4, kv_heads: 2, seq_len: 64, vocab: 1200}}
train: {{global_batch: 8, micro_batch: 4, steps: 30}}
optim: {{lr: 3.0e-3, warmup: 5}}
data:
  train: [{{path: {work}/plays_train, weight: 0.7}}, {{path: {work}/more_train, weight: 0.3}}]
  valid: [{work}/plays_valid, {work}/more_valid]
  document_mask: true
eval: {{every: 15, batches: 2}}
log: {{every: 10, metrics: {work}/blend/metrics.jsonl}}
checkpoint: {{dir: {work}/blend/ckpt, every: 30}}
seed: 7
""")
    p = run([a.trident, "train", recipe])
    records = [json.loads(l) for l in open(os.path.join(work, "blend/metrics.jsonl"))]
    last = [r for r in records if r.get("type") == "train"][-1]
    tokens = last.get("tokens_per_dataset", {})
    plays, more = tokens.get(f"{work}/plays_train", 0), tokens.get(f"{work}/more_train", 0)
    evals = [r for r in records if r.get("type") == "eval"]
    if not tokens or abs(plays / (plays + more) - 0.7) > 0.01:
        failures += 1
        print(f"FAIL blend: tokens per dataset {tokens}, expected a 0.7 / 0.3 split")
    elif not evals or len(evals[-1].get("val_loss_per_dataset", {})) != 2:
        failures += 1
        print(f"FAIL blend: evaluation records {evals}")
    else:
        print(f"ok   blend trained: tokens per dataset {tokens}, last eval {evals[-1]}")
    out = run([a.trident, "sample", os.path.join(work, "blend/ckpt"), "--prompt", "ROMEO:", "--tokens", "20",
               "--temperature", "0"]).stdout
    if len(out.strip()) == 0:
        failures += 1
        print("FAIL sample: no text")
    else:
        print(f"ok   sampled: {out.strip()[:80]!r}")
    # a model vocabulary that the tokenizer's ids do not fit: refused before training
    p = run([a.trident, "train", recipe, "--set", "model.vocab=300"], expect=2)
    if "does not fit model.vocab(300)" not in p.stderr:
        failures += 1
        print(f"FAIL small vocabulary: {p.stderr.strip()}")
    # a blend of datasets made by different tokenizers: refused
    run([a.trident, "prepare", "--input", os.path.join(work, "corpus.jsonl"), "--out", os.path.join(work, "other"),
         "--tokenizer", os.path.join(work, "gpt2.json")])
    p = run([a.trident, "train", recipe, "--set", f"data.valid={work}/other_valid"], expect=2)
    if "different tokenizers" not in p.stderr:
        failures += 1
        print(f"FAIL tokenizer mismatch: {p.stderr.strip()}")
    else:
        print("ok   refused: a model vocabulary too small, datasets of different tokenizers")
    return failures


if __name__ == "__main__":
    main()
