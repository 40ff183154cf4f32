"""``multiview_mat``: any ``.mat`` file of the multi-view learning family, plus the registered
multi-view datasets: the classic ``mv_handwritten``, ``mv_leaves100``, ``mv_ngs`` and ``mv_hw2sources``,
and ``mv_3sources``, ``mv_movies``, ``mv_webkb``, ``mv_reuters1200``, ``mv_prokaryotic``,
``mv_proteinfold``, ``mv_wikipedia``, ``mv_cora``, ``mv_cub``, ``mv_bbc``, ``mv_scene15`` (each with its
modality family, ``FAMILIES``).

The layouts (zhou572/Multi-view-Datasets, ChuanbinZhang/Multi-view-datasets, YilinZhang107/Multi-view-Datasets
and most multi-view clustering code), found by the variables' names (:func:`.layouts.find_layout`):

* the views: a 1-by-V or V-by-1 cell array ``X`` / ``data``, or variables ``x1`` .. ``xV``; each view
  (N, d_v) (one row per sample) or (d_v, N), dense or sparse, any numeric class;
* the labels: ``Y``, ``y``, ``gt``, ``gnd``, ``truth``, ``label(s)``, ``truelabel`` (N-by-1 or 1-by-N), or a
  cell holding one identical label vector per view;
* a shipped split: each of them as ``NAME_train`` / ``NAME_test``; the test block is the test split
  (``shipped_test_indices``). An ambiguous or unknown layout is one error naming the variables and the
  options ``x_key`` / ``y_key`` / ``sample_axis``.

Both MATLAB v5/v7 (read with ``scipy.io.loadmat``) and v7.3 (HDF5, read with h5py: cells are object
references into ``#refs#`` and every matrix is stored transposed; sparse matrices are groups holding
``data``/``ir``/``jc``) are accepted. Orientation: a view's sample axis is the one whose length equals
len(Y); when both axes do (square view) the same view's other part of a shipped split decides, else the way
every other view of the file is stored (with a warning), else rows are taken as samples with a warning
(option ``sample_axis`` decides explicitly). Labels: the sorted unique values map to 0..C-1 (so 0- and 1-based
files give the same classes); non-integer values are refused (``allow_fractional_labels``), and so
are classes with fewer samples than the split fractions need to put one in every split
(:func:`.splits.min_class_size`, 5 at 0.6/0.2/0.2; ``allow_small_classes``). Sparse views are
densified (standardisation makes them dense anyway). A view with 0 features, constant on the train
split, or overflowing when standardised is refused, naming its index and name
(:func:`.splits.view_problem`).

Every view is a modality of kind ``vector`` named ``view{v}`` (v = its index in the file) unless
``view_names`` names them. There is no official split: seeded stratified train/val/test splits are
drawn (``split_fractions`` default 0.6/0.2/0.2, ``split_seed`` default 0, independent of the run seed
unless ``split_seed="run"`` in the Python API; a spec says ``dataset.split_per_seed: true``); per class the counts are the floor or ceiling of fraction x class size,
the ceilings going to the splits furthest below their global target, so the totals also match the
fractions within one sample. Each view is z-scored with the mean and (population) standard deviation
of the **train** split (features constant on train become 0); the three split instances compute the
same statistics because the split assignment is recomputed from the same seed in each.

Root: the ``.mat`` file itself (``--data-root path/to/data.mat``) or a folder plus ``file=NAME.mat``
(a folder holding exactly one ``.mat`` file needs no ``file``). The registered datasets also accept
the folder containing their file and check its sha256 (``verify_sha256=False`` skips the check).
A file is read once per process (LRU keyed by path, mtime and size), not once per split.

Options: ``file``, ``x_key`` / ``y_key`` (found by name; a cell or label variable, a list of view
variables, or the prefix of x1..xV), ``shipped_split`` (True), ``views`` (list of view indices, in the order
wanted), ``view_names``, ``sample_axis`` ("auto", 0 = rows are samples, 1 = columns are samples; one
value for every view or a list with one per view of the file),
``split_fractions`` ([train, val, test] or a dict), ``split_seed`` (int or "run"), ``outer_test_seed`` (none;
an integer fixes the test split, drawn once with that seed, and ``split_seed`` then draws only the train / val
partition of the other samples: :func:`.splits.outer_split`; the spec key ``dataset.outer_test_seed``), ``standardize``
(True), ``verify_sha256`` (True), ``sha256`` (expected digest for any file),
``allow_fractional_labels`` (False), ``allow_small_classes`` (False), ``view_copies`` (none; ``{base:
[view indices], copies: k, noise: sigma, mask: p, seed: s}`` replaces the views by k copies of the base
view(s), each with its own fixed, seeded per-sample augmentation: Gaussian noise of std sigma x the
feature's train std and masking with probability p; an information-fixed control for k-views studies,
:mod:`.copies`; exclusive with ``views``; the copies are named ``copy0..copy{k-1}`` unless
``view_names`` names them).

Shape (one sample):
    modalities[view name]  [d_v] float32 (z-scored with train statistics unless standardize=False)
    target                 [] int64 class id in 0..C-1
    meta                   {"id": "<file stem>-<row>", "index": row in the file}

Modules: :mod:`.formats` (the v5 / v7.3 ``.mat`` readers, the per-process file LRU, sha256),
:mod:`.layouts` (locating the file, label and view orientation), :mod:`.splits` (stratified splits,
z-score statistics), :mod:`.copies` (the ``view_copies`` option), :mod:`.synthetic` (the synthetic
twin), :mod:`.adapter` (the registered :class:`MultiviewMat`) and :mod:`.classic` (the registered
classic datasets). The package exports the adapter classes and the public helpers in ``__all__``;
every other name is imported from the module that defines it. The adapters keep ``__module__ =
"fusebench.datasets.multiview_mat"`` (prepared-cache manifests, registry origin) and every module logs
to the ``fusebench.datasets.multiview_mat`` logger; importing this package registers all five adapters.
"""

from __future__ import annotations

from .adapter import MultiviewMat
from .classic import (FAMILIES, Mv3sources, MvBbc, MvCora, MvCub, MvHandwritten, MvHw2sources, MvLeaves100, MvMovies,
                      MvNgs, MvProkaryotic, MvProteinfold, MvReuters1200, MvScene15, MvWebkb, MvWikipedia)
from .copies import augmented_copies, parse_view_copies
from .formats import read_mat, sha256_of
from .layouts import labels_to_ids, orient
from .splits import parse_fractions, stratified_split, zscore_stats

__all__ = ["FAMILIES", "MultiviewMat", "Mv3sources", "MvBbc", "MvCora", "MvCub", "MvHandwritten", "MvHw2sources",
           "MvLeaves100", "MvMovies", "MvNgs", "MvProkaryotic", "MvProteinfold", "MvReuters1200", "MvScene15", "MvWebkb",
           "MvWikipedia", "augmented_copies",
           "labels_to_ids", "orient", "parse_fractions", "parse_view_copies", "read_mat", "sha256_of",
           "stratified_split", "zscore_stats"]
