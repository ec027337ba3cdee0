"""Linguistic steganography with language models: arithmetic-coding steganography, the LM's lossless rank coding, and
StegoZip's payload compression (semantic pruning with an LM restorer).

Nothing heavy is imported until a name below is first used.
"""
