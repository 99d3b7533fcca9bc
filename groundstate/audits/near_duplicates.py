"""Near-duplicate instructions: word-3-shingle Jaccard similarity, with MinHash LSH to propose the pairs.

Instructions are compared after `normalise_instruction` (NFKC, lowercase, punctuation and underscores to spaces,
whitespace collapsed), so rewording that only changes case, punctuation or spacing is no difference at all.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping

_PUNCT = re.compile(r"[^\w\s]", re.UNICODE)
_SPACE = re.compile(r"\s+")


def normalise_instruction(text: str) -> str:
    """Lowercase, punctuation stripped, whitespace collapsed (unicode NFKC first)."""
    text = unicodedata.normalize("NFKC", text).lower()
    text = _PUNCT.sub(" ", text).replace("_", " ")
    return _SPACE.sub(" ", text).strip()


def shingles(text: str, k: int = 3) -> set[str]:
    """Word k-shingles of the normalised text (the whole text when it has fewer than k words)."""
    words = normalise_instruction(text).split()
    if len(words) < k:
        return {" ".join(words)} if words else set()
    return {" ".join(words[i : i + k]) for i in range(len(words) - k + 1)}


def jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


def lsh_params(threshold: float, num_perm: int = 128, miss: float = 1e-6) -> tuple[int, int]:
    """(bands, rows) for MinHash LSH: the most selective banding whose chance of missing a pair at exactly
    `threshold` Jaccard, 1 − (1 − J^r)^b, is at most `miss` (pairs above the threshold are missed even less)."""
    best = (num_perm, 1)
    for r in range(1, num_perm + 1):
        b = num_perm // r
        if (1 - threshold**r) ** b <= miss:
            best = (b, r)
    return best


def near_duplicates(
    candidates: Mapping[str, str], references: Mapping[str, str], threshold: float = 0.7, num_perm: int = 128, seed: int = 1, method: str = "auto"
) -> dict[str, list[tuple[str, float]]]:
    """Candidate id → [(reference id, Jaccard)] for instructions with word-3-shingle Jaccard ≥ threshold.

    `minhash`: MinHash LSH (datasketch, fixed seed, so deterministic) proposes pairs, banded so that a pair at
    the threshold is missed with probability ≤ 1e-6; `exact`: every pair. Either way each pair is confirmed
    with the exact Jaccard of the shingle sets. `auto`: minhash when datasketch is installed, else exact.
    Matches are sorted by Jaccard (highest first), then reference id.
    """
    if not 0 < threshold <= 1:
        raise ValueError(f"near-duplicate threshold must be in (0, 1], got {threshold}")
    ref_sh = {rid: shingles(t) for rid, t in references.items()}
    cand_sh = {cid: shingles(t) for cid, t in candidates.items()}
    out: dict[str, list[tuple[str, float]]] = {}
    if not ref_sh or not cand_sh:
        return out
    if method == "auto":
        method = "minhash" if near_duplicate_method() == "minhash" else "exact"
    if method == "minhash":
        from datasketch import MinHash, MinHashLSH

        def minhash(sh: set[str]) -> MinHash:
            m = MinHash(num_perm=num_perm, seed=seed)
            m.update_batch(sorted(s.encode("utf-8") for s in sh))
            return m

        lsh = MinHashLSH(num_perm=num_perm, params=lsh_params(threshold, num_perm))
        for rid in sorted(ref_sh):
            if ref_sh[rid]:
                lsh.insert(rid, minhash(ref_sh[rid]))
        proposals = {cid: lsh.query(minhash(sh)) if sh else [] for cid, sh in cand_sh.items()}
    elif method == "exact":
        proposals = {cid: list(ref_sh) for cid in cand_sh}
    else:
        raise ValueError(f"unknown near-duplicate method {method!r}: auto, minhash or exact")
    for cid in sorted(cand_sh):
        hits = []
        for rid in proposals[cid]:
            j = jaccard(cand_sh[cid], ref_sh[rid])
            if j >= threshold and cand_sh[cid]:
                hits.append((rid, round(j, 6)))
        if hits:
            out[cid] = sorted(hits, key=lambda h: (-h[1], h[0]))
    return out


def near_duplicate_method() -> str:
    """minhash when datasketch is importable, else exact (all pairs)."""
    import importlib.util

    return "minhash" if importlib.util.find_spec("datasketch") is not None else "exact"
