"""The registered classic multi-view datasets ``mv_handwritten``, ``mv_leaves100``, ``mv_ngs`` and
``mv_hw2sources``: subclasses of :class:`~fusebench.datasets.multiview_mat.MultiviewMat` naming their
file, its sha256, the views and the classes.
"""

from __future__ import annotations

from .. import DATASETS
from ..base import DataFile, Modality
from .adapter import _MODULE, MultiviewMat

# fixtures: zhou572/Multi-view-Datasets @ da48f8bf
_SOURCE = ("Copies of the files in the public repository zhou572/Multi-view-Datasets "
           "(https://github.com/zhou572/Multi-view-Datasets, commit da48f8bf4270c73d57c814a470fcd5fb16d757db; "
           "that repository has no licence file: cite the original sources). ")
_LAYOUT = ("The data root is the folder containing {file} or the file itself; its sha256 is checked "
           "(verify_sha256=False skips). No official split: seeded stratified 60/20/20 train/val/test "
           "(split_fractions, split_seed).")


def _registered(id_: str, title: str, file: str, sha: str, classes: int, dims: list[tuple[int, str]], info: str) -> type:
    mods = tuple(Modality(f"view{i}", "vector", d, description=desc) for i, (d, desc) in enumerate(dims))
    cls = type(f"Multiview_{id_}", (MultiviewMat,), {
        "__doc__": f"{title} ({file}, {len(dims)} views, {classes} classes).",
        "__module__": _MODULE,
        "id": id_, "FILE": file, "SHA256": sha, "num_classes": classes, "MODALITIES": mods,
        "FILES": (DataFile(file, f"X: 1x{len(dims)} cell of ({'/'.join(str(d) for d, _ in dims)})-column views, "
                                 f"Y: N x 1 labels 1..{classes} (MATLAB v5)", sha256=sha),),
        "INFO": info + " " + _SOURCE + _LAYOUT.format(file=file),
    })
    DATASETS.add(id_, cls)
    return cls


MvHandwritten = _registered(
    "mv_handwritten", "UCI mfeat handwritten digits", "handwritten.mat", "58843f19f3cea95dd3c506b2d44484b4589cc56c45786061db0778366c72bf06", 10,
    [(240, "pixel averages in 2x3 windows (mfeat-pix)"), (76, "Fourier coefficients of the character shapes (mfeat-fou)"),
     (216, "profile correlations (mfeat-fac)"), (47, "Zernike moments (mfeat-zer)"),
     (64, "Karhunen-Loeve coefficients (mfeat-kar)"), (6, "morphological features (mfeat-mor)")],
    "UCI Multiple Features (mfeat) handwritten digits 0-9, 2000 samples (200 per class), 6 views; "
    "UCI Machine Learning Repository, Duin 1998, CC BY 4.0 (https://archive.ics.uci.edu).")
MvLeaves100 = _registered(
    "mv_leaves100", "UCI one-hundred plant species leaves", "100Leaves.mat", "1602949219623cf7ec8455528f91c4544e3a5f96311d09d9134a8b688f1fb768", 100,
    [(64, "64-bin leaf descriptor histogram (shape, margin or texture)")] * 3,
    "UCI One-hundred plant species leaves, 1600 samples (16 per species, 100 species), 3 views (shape, "
    "fine-scale margin, texture histograms, 64-d each); Mallah, Cope and Orwell 2013, UCI Machine Learning "
    "Repository, CC BY 4.0 (https://archive.ics.uci.edu).")
MvNgs = _registered(
    "mv_ngs", "20 Newsgroups subset, three pre-processings", "NGs.mat", "9100c95e9cbf8d793c2139ee29b3d1e95330cc6007ade321c05262ee030554c9", 5,
    [(2000, "bag-of-words, pre-processing 1"), (2000, "bag-of-words, pre-processing 2"),
     (2000, "bag-of-words, pre-processing 3")],
    "NGs: a 500-document, 5-class subset of 20 Newsgroups (Lang 1995, http://qwone.com/~jason/20Newsgroups/), "
    "3 views = three pre-processings of the same documents (2000-d bag-of-words each).")
MvHw2sources = _registered(
    "mv_hw2sources", "Handwritten digits from MNIST and USPS", "HW2sources.mat", "a888aaf7a582513790340861222346f5b66b071a6fa3c8a370656ba0343ae925", 10,
    [(784, "MNIST 28x28 digit image"), (256, "USPS 16x16 digit image")],
    "HW2sources: 2000 handwritten digits 0-9 (200 per class) seen in two sources, MNIST (LeCun et al. 1998, "
    "28x28 = 784-d) and USPS (Hull 1994, 16x16 = 256-d) images of the same digit classes.")
