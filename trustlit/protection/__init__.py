"""Data protection: availability attacks (unlearnable examples) on images, and DEGauss, the defense of 3D
Gaussian-splatting scenes against instruction-driven editing, with its pure-torch renderer.

Nothing heavy is imported until a name below is first used.
"""
