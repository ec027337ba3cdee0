"""Attacks on learning and on data protection: instance-targeted poisoning against ERM and the randomized learner with
the optimal agnostic rate, and BridgePure's purification of protected (unlearnable) images.

Nothing heavy is imported until a name below is first used.
"""
