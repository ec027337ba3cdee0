"""Data protection: availability attacks (unlearnable examples) on images, and DEGauss, the defense of 3D
Gaussian-splatting scenes against instruction-driven editing, with its pure-torch renderer.

Nothing heavy is imported until a name below is first used.
"""

from trustlit.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "trustlit.protection.availability": [
            "PROTECTIONS",
            "AutoregressivePerturbation",
            "ClasswiseErrorMinimizingNoise",
            "ErrorMinimizingNoise",
            "LinearSeparablePerturbation",
            "OnePixelShortcut",
            "Protection",
            "RandomNoise",
            "build_protection",
        ],
        "trustlit.protection.degauss": ["DEGaussDefense", "degauss", "protect"],
        "trustlit.protection.editor": [
            "EditPairsDataModule",
            "InstructPix2PixEditor",
            "InstructionEditor",
            "iterative_dataset_update",
        ],
        "trustlit.protection.scenes": [
            "GaussianSceneFit",
            "ProceduralSceneDataModule",
            "SceneViewsDataModule",
            "procedural_scene",
        ],
        "trustlit.protection.splatting": ["Camera", "Gaussians", "camera_ring", "render"],
    },
)
