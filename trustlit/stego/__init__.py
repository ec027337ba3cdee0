"""Linguistic steganography with language models: arithmetic-coding steganography, the LM's lossless rank coding, and
StegoZip's payload compression (semantic pruning with an LM restorer).

Nothing heavy is imported until a name below is first used.
"""

from trustlit.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "trustlit.stego.coding": [
            "StegoCorruptionError",
            "StegoSettings",
            "compress",
            "decompress",
            "embed_bits",
            "extract_bits",
        ],
        "trustlit.stego.stegozip": ["StegoZipCodec", "StegoZipRestorer", "prune", "restoration_scores"],
    },
)
