"""What the goldens scripts share: a safetensors writer over numpy arrays, a compact JSON dump,
an indented JSON file (a checkpoint's config) and floats rounded to 9 significant digits.

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))  # scripts/
    from goldens_io import write_safetensors, write_goldens, write_json, rounded
"""
import argparse, json, os, struct, sys

import numpy as np


def write_safetensors(path, tensors):
    """tensors: name -> array (anything np.asarray takes), written as little-endian F32, names sorted."""
    header, off, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for name in sorted(tensors):
        a = np.ascontiguousarray(np.asarray(tensors[name]), dtype="<f4")
        b = a.tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * ((8 - (8 + len(hj)) % 8) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)


def write_goldens(path, obj):
    """One-line JSON (goldens are read by tests, not people) and a note of its size on stderr."""
    with open(path, "w") as f:
        json.dump(obj, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {path} ({os.path.getsize(path)} bytes)", file=sys.stderr)


def write_json(path, obj):
    """Indented JSON (a config people read), its folder made first."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(obj, f, indent=2); f.write("\n")


def rounded(a):
    """Every value of `a`, flattened, as a float of 9 significant digits (an fp32 value exactly)."""
    return [float(f"{v:.9g}") for v in np.asarray(a).reshape(-1)]


def models_out_dir(script):
    """The --out folder of a goldens script (default: tests/data/models beside scripts/), absolute."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(script), "..", "tests", "data", "models"))
    return os.path.abspath(ap.parse_args().out)


def write_sentence_transformers(folder, hidden_size):
    """A sentence-transformers folder's modules: Transformer, Pooling (mean), Normalize."""
    write_json(os.path.join(folder, "modules.json"), [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}])
    write_json(os.path.join(folder, "1_Pooling", "config.json"), {
        "word_embedding_dimension": hidden_size, "pooling_mode_cls_token": False,
        "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False, "pooling_mode_weightedmean_tokens": False,
        "pooling_mode_lasttoken": False, "include_prompt": True})
    os.makedirs(os.path.join(folder, "2_Normalize"), exist_ok=True)
    open(os.path.join(folder, "2_Normalize", ".keep"), "w").close()
