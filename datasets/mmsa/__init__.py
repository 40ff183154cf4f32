"""Multimodal sentiment adapters ``mosi``, ``mosei`` (CMU) and ``chsims`` (CH-SIMS), from the MMSA
feature pickles, single-clip MMSA-FET feature files and CMU-MultimodalSDK computational sequences.

Datasets: CMU-MOSI (Zadeh et al., IEEE Intelligent Systems 2016), CMU-MOSEI (Zadeh et al., ACL 2018),
CH-SIMS (Yu et al., ACL 2020). Task: regression of the utterance sentiment; CMU labels in [-3, 3],
CH-SIMS labels in [-1, 1] with unimodal labels ``T``, ``A``, ``V`` as ``extra_targets``.

Layouts (option ``layout``; ``"auto"`` picks from what ``root`` holds, see docs/datasets/sentiment.md):

* ``"mmsa"``: the MMSA pickles (``unaligned_50.pkl`` / ``aligned_50.pkl`` for MOSI/MOSEI,
  ``unaligned_39.pkl`` for CH-SIMS; option ``file`` names another). Top level ``{"train", "valid",
  "test"}`` (our split ``val`` reads ``valid``); each split a dict of ``text`` [n, T, 768] BERT
  features and/or ``text_bert`` [n, 3, T] (input ids / attention mask / token type ids), ``audio``
  [n, T_a, d_a], ``vision`` [n, T_v, d_v], ``regression_labels`` [n] (CH-SIMS also
  ``regression_labels_T/A/V``), ``audio_lengths``/``vision_lengths`` [n] (unaligned files), ``id``,
  ``raw_text``. Unaligned sequences are zero-padded at the end (MMSA packs them with these lengths):
  audio/vision are trimmed to their lengths and text to the ``text_bert`` attention-mask sum. Aligned
  files carry no lengths: all three modalities are trimmed to the ``text_bert`` attention-mask sum, the
  length MMSA's models run aligned audio/vision for (untrimmed when the file has no ``text_bert``). A length
  must be an integer in 0..T (T = padded length; 0 = the modality is missing for that sample), else
  :class:`DatasetError` names file, split, sample and range. Every split must give a modality the same feature dimension; an empty split is an
  error (see :class:`~fusebench.datasets.base.MultimodalDataset`).
* ``"feature_file"``: one MMSA-FET output dict for a single clip (``text`` [T, 768], ``text_bert``
  [3, T], ``audio`` [T, d_a], ``vision`` [T, d_v]; no label) such as the CH-SIMS fixture. It goes
  through the same validation and sample code as an MMSA split with n = 1 and yields one sample in
  every split; its target is NaN unless ``label=`` (and for CH-SIMS ``unimodal_labels={"T": ..}``)
  is given.
* ``"csd"`` (``mosi``/``mosei`` only): a folder of computational sequences, see :mod:`.csd`. Samples
  are the rows of the labels sequence (``*Labels*.csd``, sentiment = column 0); feature sequences are
  sliced to each segment's interval (``csd_alignment="slice"``, variable length) or averaged over
  the segment's word intervals (``"text"``, aligned). Folds: ``folds={"train": [video ids], ...}``,
  or ``folds.json`` in the root, else the CMU-MultimodalSDK's standard folds of MOSI / MOSEI (:mod:`.folds`;
  MOSI's when they hold every video of the labels; MOSEI's when they hold some, the labels' videos that no
  fold lists left out of every split with a warning), else a deterministic video-level split (videos
  ordered by sha256 of their id, cut 52/10/31 for MOSI — the sizes of the standard folds — and 70/10/20
  for MOSEI).

Text modality: ``text_field="text"`` (BERT features, d = 768) or ``"text_bert"`` (token rows as a
[T, 3] float32 sequence: id, mask, type); ``"auto"`` prefers ``text``.
Non-finite features raise :class:`DatasetError` naming file, split, key, sample index and id;
``nonfinite="zero"`` replaces them by 0 instead (MMSA itself zeroes ``-inf`` in audio/vision).

Shape (one sample):
    modalities["text"]   [T_t, 768] float32 (or [T_t, 3] for text_bert)
    modalities["audio"]  [T_a, d_a] float32   (MOSI 5, MOSEI 74, CH-SIMS 33 in MMSA's files)
    modalities["vision"] [T_v, d_v] float32   (MOSI 20, MOSEI 35, CH-SIMS 709)
    target               [] float32
    extra_targets        {"T", "A", "V"}: [] float32 (chsims only)

Modules: :mod:`.layouts` (layout detection, the pickle path, the ``csd`` layout and its
deterministic video split), :mod:`.folds` (MOSI's and MOSEI's standard folds, the CMU-MultimodalSDK's), :mod:`.formats` (MMSA pickle and feature-file reading and validation),
:mod:`.synthetic` (the synthetic twins: MMSA pickle or computational sequences) and :mod:`.adapter`
(the registered :class:`MOSI`, :class:`MOSEI`, :class:`CHSIMS`). The package exports the three adapter
classes; every other name is imported from the module that defines it. The adapters keep
``__module__ = "fusebench.datasets.mmsa"`` (prepared-cache manifests, registry origin); importing this
package registers the three adapters.
"""

from __future__ import annotations

from .adapter import CHSIMS, MOSEI, MOSI

__all__ = ["CHSIMS", "MOSEI", "MOSI"]
