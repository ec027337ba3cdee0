"""Short names of trustlit's classes mapped to their import paths, resolved lazily.

One table serves the CLI (``--model SimNPO`` imports only ``trustlit.unlearning``), ``import
trustlit`` (its top-level names load on first use) and the tests that check every method ships a
recipe and a docs page. A new family registers its classes here and touches nothing else.

    register("SimNPO", "trustlit.unlearning.simnpo:SimNPO", kind="method")
    resolve("SimNPO")        # the class, its module imported now
"""

from __future__ import annotations

import difflib
import importlib
from dataclasses import dataclass
from typing import Any, Literal, get_args

Kind = Literal["method", "model", "data", "callback", "logger", "analysis"]
KINDS: tuple[str, ...] = get_args(Kind)


@dataclass(frozen=True)
class Entry:
    """``target`` is ``package.module:Attribute``; ``kind`` says what the class is (``method``: a
    research method, which must ship a recipe and a docs page); ``family`` groups it (privacy, unlearning...)."""

    name: str
    target: str
    kind: str
    family: str

    @property
    def module(self) -> str:
        return self.target.split(":", 1)[0]

    @property
    def attribute(self) -> str:
        return self.target.split(":", 1)[1]

    @property
    def class_path(self) -> str:
        """The dotted path recipes write in ``class_path``."""
        return f"{self.module}.{self.attribute}"


_ENTRIES: dict[str, Entry] = {}


def register(name: str, target: str, *, kind: Kind, family: str) -> None:
    """Add ``name`` -> ``target`` (``package.module:Attribute``); a name registered twice is an error."""
    if ":" not in target:
        raise ValueError(f"registry target for '{name}' must be 'package.module:Attribute', got '{target}'")
    if kind not in KINDS:
        raise ValueError(f"registry kind for '{name}' must be one of {list(KINDS)}, got '{kind}'")
    if name in _ENTRIES and _ENTRIES[name].target != target:
        raise ValueError(f"'{name}' is registered already, as {_ENTRIES[name].target}")
    _ENTRIES[name] = Entry(name, target, kind, family)


def entries(kind: str | None = None, family: str | None = None) -> list[Entry]:
    """Registered entries, by name, optionally of one ``kind`` and ``family``."""
    return [
        e
        for _, e in sorted(_ENTRIES.items())
        if (kind is None or e.kind == kind) and (family is None or e.family == family)
    ]


def entry(name: str) -> Entry:
    """The entry of ``name``; an unknown name is a ``KeyError`` listing close matches."""
    if name in _ENTRIES:
        return _ENTRIES[name]
    close = difflib.get_close_matches(name, list(_ENTRIES), n=3, cutoff=0.6)
    hint = f"; did you mean {', '.join(close)}?" if close else f"; known: {', '.join(sorted(_ENTRIES))}"
    raise KeyError(f"unknown trustlit name '{name}'{hint}")


def resolve(name: str) -> Any:
    """The object ``name`` stands for, importing its module now."""
    found = entry(name)
    return getattr(importlib.import_module(found.module), found.attribute)


def _register_all() -> None:
    table = {
        # family: {kind: {name: module}}
        "core": {
            "method": {"CausalLMFineTuning": "trustlit.finetune"},
            "model": {"CausalLMModule": "trustlit.llm.module"},
            "callback": {
                "SplitMetricsTable": "trustlit.callbacks",
                "RequeueAtBatchEnd": "trustlit.callbacks",
                "HarvestActivations": "trustlit.llm.harvest",
            },
            "logger": {"WandbLogger": "trustlit.loggers"},
            "data": {
                "QADataModule": "trustlit.data.qa",
                "ForgetRetainDataModule": "trustlit.data.forget_retain",
                "TabularDataModule": "trustlit.data.tabular",
                "HarmfulFineTuningDataModule": "trustlit.data.safety",
                "ActivationDataModule": "trustlit.data.activations",
            },
        },
        "privacy": {
            "method": {"DPSGD": "trustlit.privacy.dpsgd", "PMSVM": "trustlit.privacy.pmsvm"},
            "model": {"MLPClassifier": "trustlit.classifiers"},
            "analysis": {
                "PrivateDistributionEstimation": "trustlit.privacy.distribution_analysis",
                "PrivateVaccination": "trustlit.privacy.vaccination_analysis",
            },
            "data": {
                "DistributionSamples": "trustlit.data.distribution_samples",
                "ContactNetworkDataModule": "trustlit.data.contact_networks",
            },
        },
        "audit": {
            "callback": {"MembershipInference": "trustlit.audit.mia"},
            "analysis": {"MIAPoisoning": "trustlit.audit.mia_poisoning"},
        },
        "unlearning": {
            "method": {
                name: f"trustlit.unlearning.{module}"
                for name, module in {
                    "GradAscent": "grad_ascent",
                    "GradDiff": "grad_diff",
                    "KLMinimization": "kl",
                    "NPO": "npo",
                    "SimNPO": "simnpo",
                    "IdkDPO": "idk_dpo",
                    "RMU": "rmu",
                    "LUNAR": "lunar",
                    "AttentionShifting": "attention_shifting",
                }.items()
            },
            "callback": {"UnlearningEvaluation": "trustlit.unlearning.evaluation"},
        },
        "interpret": {
            "method": {
                name: f"trustlit.interpret.sae.{module}"
                for name, module in {
                    "ReLUSAE": "relu",
                    "TopKSAE": "topk",
                    "BatchTopKSAE": "batch_topk",
                    "JumpReLUSAE": "jumprelu",
                    "MatchingPursuitSAE": "matching_pursuit",
                }.items()
            }
            | {"ExplainR": "trustlit.interpret.concepts"},
            "callback": {"IntrinsicDimension": "trustlit.interpret.layer_dimension"},
            "analysis": {"SubsequenceTracing": "trustlit.interpret.tracing"},
            "data": {
                "EmbeddingConceptDataModule": "trustlit.data.concepts",
                "HierarchicalFeaturesDataModule": "trustlit.data.hierarchy",
                "MCQADataModule": "trustlit.data.mcqa",
                "PlantedAssociationDataModule": "trustlit.data.planted",
            },
        },
        "attribution": {
            "method": {"Contimask": "trustlit.attribution.contimask"},
            "analysis": {
                "TabularShapley": "trustlit.attribution.explain",
                "TokenInteractions": "trustlit.attribution.explain",
            },
            "model": {
                "MTANClassifier": "trustlit.irregular_classifiers",
                "ObservationTransformer": "trustlit.irregular_classifiers",
            },
            "data": {"IrregularTimeSeriesDataModule": "trustlit.data.timeseries"},
        },
        "graphs": {
            "method": {"TopERClassifier": "trustlit.graphs.classifier"},
            "data": {"GraphDataModule": "trustlit.data.graphs"},
        },
        "neuro": {
            "analysis": {"SemanticBottleneckDecoding": "trustlit.neuro.decoding"},
            "data": {"FMRIDecodingDataModule": "trustlit.data.fmri"},
        },
        "attacks": {
            "method": {"BridgePure": "trustlit.attacks.purification"},
            "model": {"SupervisedDenoiser": "trustlit.attacks.purification"},
            "analysis": {"TargetedPoisoning": "trustlit.attacks.poisoning_analysis"},
            "data": {
                "LabeledPointsDataModule": "trustlit.data.labeled_points",
                "LeakedPairsDataModule": "trustlit.data.leaked_pairs",
            },
        },
        "protection": {
            "method": {"GaussianSceneFit": "trustlit.protection.scenes"},
            "model": {
                "InstructionEditor": "trustlit.protection.editor",
                "ImageClassifier": "trustlit.image_classifiers",
            },
            "analysis": {"DEGaussDefense": "trustlit.protection.degauss"},
            "data": {
                "ProceduralSceneDataModule": "trustlit.protection.scenes",
                "SceneViewsDataModule": "trustlit.protection.scenes",
                "EditPairsDataModule": "trustlit.protection.editor",
                "ImageClassificationDataModule": "trustlit.data.images",
            },
        },
        "stego": {
            "method": {"StegoZipRestorer": "trustlit.stego.stegozip"},
            "data": {"StegoMessageDataModule": "trustlit.data.stego_messages"},
        },
        "safety": {
            "method": {
                "SFT": "trustlit.safety.baselines",
                "Lisa": "trustlit.safety.baselines",
                "Vaccine": "trustlit.safety.baselines",
                "Booster": "trustlit.safety.baselines",
                "RepNoise": "trustlit.safety.baselines",
                "Panacea": "trustlit.safety.panacea",
                "BDS": "trustlit.safety.bds",
            },
            "callback": {
                "SafetyEvaluation": "trustlit.safety.evaluation",
                "ApplyPanaceaPerturbation": "trustlit.safety.panacea",
            },
        },
    }
    for family, kinds in table.items():
        for kind, names in kinds.items():
            for name, module in names.items():
                register(name, f"{module}:{name}", kind=kind, family=family)


_register_all()
