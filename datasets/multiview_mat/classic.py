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


def _registered(id_: str, title: str, file: str, sha: str, classes: int, dims: list[tuple[int, str]], info: str,
                family: str, names: list[str] | None = None, layout: str | None = None, source: str = _SOURCE,
                split: str | None = None) -> type:
    names = names or [f"view{i}" for i in range(len(dims))]
    mods = tuple(Modality(name, "vector", d, description=desc) for name, (d, desc) in zip(names, dims))
    layout = layout or (f"X: 1x{len(dims)} cell of ({'/'.join(str(d) for d, _ in dims)})-column views, "
                        f"Y: N x 1 labels 1..{classes} (MATLAB v5)")
    cls = type(f"Multiview_{id_}", (MultiviewMat,), {
        "__doc__": f"{title} ({file}, {len(dims)} views, {classes} classes).",
        "__module__": _MODULE,
        "id": id_, "FILE": file, "SHA256": sha, "num_classes": classes, "MODALITIES": mods,
        "MODALITY_FAMILY": family,
        "FILES": (DataFile(file, layout, sha256=sha),),
        "INFO": info + " " + source + _LAYOUT.format(file=file) if split is None else
                info + " " + source + split.format(file=file),
    })
    DATASETS.add(id_, cls)
    return cls


MvHandwritten = _registered(
    "mv_handwritten", "UCI mfeat handwritten digits", "handwritten.mat", "58843f19f3cea95dd3c506b2d44484b4589cc56c45786061db0778366c72bf06", 10,
    [(240, "pixel averages in 2x3 windows (mfeat-pix)"), (76, "Fourier coefficients of the character shapes (mfeat-fou)"),
     (216, "profile correlations (mfeat-fac)"), (47, "Zernike moments (mfeat-zer)"),
     (64, "Karhunen-Loeve coefficients (mfeat-kar)"), (6, "morphological features (mfeat-mor)")],
    "UCI Multiple Features (mfeat) handwritten digits 0-9, 2000 samples (200 per class), 6 views; "
    "UCI Machine Learning Repository, Duin 1998, CC BY 4.0 (https://archive.ics.uci.edu).", "image")
MvLeaves100 = _registered(
    "mv_leaves100", "UCI one-hundred plant species leaves", "100Leaves.mat", "1602949219623cf7ec8455528f91c4544e3a5f96311d09d9134a8b688f1fb768", 100,
    [(64, "64-bin leaf descriptor histogram (shape, margin or texture)")] * 3,
    "UCI One-hundred plant species leaves, 1600 samples (16 per species, 100 species), 3 views (shape, "
    "fine-scale margin, texture histograms, 64-d each); Mallah, Cope and Orwell 2013, UCI Machine Learning "
    "Repository, CC BY 4.0 (https://archive.ics.uci.edu).", "image")
MvNgs = _registered(
    "mv_ngs", "20 Newsgroups subset, three pre-processings", "NGs.mat", "9100c95e9cbf8d793c2139ee29b3d1e95330cc6007ade321c05262ee030554c9", 5,
    [(2000, "bag-of-words, pre-processing 1"), (2000, "bag-of-words, pre-processing 2"),
     (2000, "bag-of-words, pre-processing 3")],
    "NGs: a 500-document, 5-class subset of 20 Newsgroups (Lang 1995, http://qwone.com/~jason/20Newsgroups/), "
    "3 views = three pre-processings of the same documents (2000-d bag-of-words each).", "text")
MvHw2sources = _registered(
    "mv_hw2sources", "Handwritten digits from MNIST and USPS", "HW2sources.mat", "a888aaf7a582513790340861222346f5b66b071a6fa3c8a370656ba0343ae925", 10,
    [(784, "MNIST 28x28 digit image"), (256, "USPS 16x16 digit image")],
    "HW2sources: 2000 handwritten digits 0-9 (200 per class) seen in two sources, MNIST (LeCun et al. 1998, "
    "28x28 = 784-d) and USPS (Hull 1994, 16x16 = 256-d) images of the same digit classes.", "image")

# -- the fourth round: eleven more files, in the layouts other releases use (fixtures: multiview2/) -----------------
_SOURCE_CZ = ("Copies of the files in the public repository ChuanbinZhang/Multi-view-datasets "
              "(https://github.com/ChuanbinZhang/Multi-view-datasets, commit 03ead31e6538322e4e0701c3c28a01595c1a015d; "
              "no licence file: cite the original sources, listed in that repository's README). ")
_SOURCE_YZ = ("Copies of the files in the public repository YilinZhang107/Multi-view-Datasets "
              "(https://github.com/YilinZhang107/Multi-view-Datasets, commit 2ebc3a40834f321e52db5007c05ab76e8365c2c0; "
              "no licence file: cite the original sources). ")
_SHIPPED = ("The data root is the folder containing {file} or the file itself; its sha256 is checked "
            "(verify_sha256=False skips). The file ships a train / test split: its test part is the test split "
            "(recorded as dataset.splits.shipped_split; shipped_split=False draws a stratified split of all samples "
            "instead), and train / val are a seeded stratified split of its train part in the proportion of "
            "split_fractions' train : val.")


def _cell(dims: list[tuple[int, str]], classes: int, orient: str = "N x d") -> str:
    return (f"X: {len(dims)}x1 cell of ({'/'.join(str(d) for d, _ in dims)})-feature views stored {orient}; "
            f"y: N x 1 labels 1..{classes} (MATLAB v5)")


_D = [(3560, "bag of words of the BBC story"), (3631, "bag of words of the Reuters story"),
      (3068, "bag of words of The Guardian's story")]
Mv3sources = _registered(
    "mv_3sources", "3Sources news stories", "3Sources.mat", "8a94f0e554c5782bc87561314f1bad8ca206910125734f4dbe2492956528c9ae", 6,
    _D, "3Sources: 169 news stories reported by three online sources, BBC, Reuters and The Guardian (Greene and "
    "Cunningham 2009, http://mlg.ucd.ie/datasets/3sources.html), 6 topical classes (11 to 56 stories); one "
    "bag-of-words view per source (raw term counts stored densely, about 4% non-zero). The file does not name its "
    "views; they are named in the order the dataset's documentation lists the sources.",
    "text", ["bbc", "reuters", "guardian"], _cell(_D, 6), _SOURCE_CZ)
_D = [(1878, "keywords of the movie (binary bag of words)"), (1398, "actors of the movie (binary)")]
MvMovies = _registered(
    "mv_movies", "IMDb movies: keywords and actors", "Movies.mat", "7922e27da06361c0d74b5dd6477e6485d1f73a96cf0164e280e5b38864ffcbad", 17,
    _D, "Movies: 617 IMDb movies in 17 genres (7 to 46 per genre; Bisson and Grimal 2012), 2 views: keywords and "
    "actors.", "text", ["keywords", "actors"], _cell(_D, 17), _SOURCE_CZ)
_D = [(1840, "anchor text of the links pointing to the page"), (3000, "words of the page's content")]
MvWebkb = _registered(
    "mv_webkb", "WebKB web pages: anchor text and content", "WebKB.mat", "a1a3e7c50dac79ade224d556e1ff371a190fbb56c174eadfe05bad74bcec52ea", 2,
    _D, "WebKB: 1051 web pages of four universities' computer-science departments (Blum and Mitchell 1998), course "
    "(230) vs non-course (821) pages, imbalanced; 2 views: anchor text and page content.",
    "text", ["anchor", "content"], _cell(_D, 2), _SOURCE_CZ)
_D = [(2000, "bag of words of the document in one of the five languages")] * 5
MvReuters1200 = _registered(
    "mv_reuters1200", "Multilingual Reuters, 1200 documents", "Reuters-1200.mat", "cf549b72a66d7418a639a940899993c052bab9ec868fd493451cf85cd0d81d14", 6,
    _D, "Reuters-1200: a 1200-document subset (200 per class, 6 classes) of the Reuters RCV1/RCV2 multilingual "
    "corpus (Amini, Usunier and Goutte 2009): the same documents in five languages (English and its "
    "translations), 2000 weighted words per language. The file does not say which view is which language.",
    "text", [f"language{i}" for i in range(5)], _cell(_D, 6), _SOURCE_CZ)
_D = [(393, "gene repertoire"), (3, "proteome composition"), (438, "text description of the species")]
MvProkaryotic = _registered(
    "mv_prokaryotic", "Prokaryotic species: genomic views and text", "Prokaryotic.mat", "20471598a8c819fb35e94f102cda4300a3b4f2cd185d3cbe0ea06e0349a7ed7c", 4,
    _D, "Prokaryotic: 551 prokaryotic species in 4 phylum classes (Brbic et al. 2016), described by two genomic "
    "representations (gene repertoire, proteome composition) and a text view.",
    "other", ["gene_repertoire", "proteome_composition", "text"], _cell(_D, 4), _SOURCE_CZ)
_D = [(27, "one of the twelve protein feature spaces")] * 12
MvProteinfold = _registered(
    "mv_proteinfold", "Protein fold recognition, 12 views", "ProteinFold.mat", "07522212f7fab626684ab07b030b47902a5ae75d1b4215ec947e919dcfe05dcf", 27,
    _D, "ProteinFold: 694 proteins in 27 SCOP fold classes (12 to 77 per fold; Ding and Dubchak 2001, Damoulas and "
    "Girolami 2008), k = 12 views of 27 features each. At k = 12 an objective whose cost grows as n^k is "
    "decided before training (docs/kviews.md).",
    "other", [f"view{i}" for i in range(12)], _cell(_D, 27), _SOURCE_CZ)
_D = [(128, "image: SIFT bag of visual words"), (10, "text: LDA topic proportions")]
MvWikipedia = _registered(
    "mv_wikipedia", "Wikipedia featured articles, image + text", "Wikipedia.mat", "6eed8527704611dff921243d86dbec5621312b8c6636086ae3677508b5d3cb03", 10,
    _D, "Wikipedia: 2866 image + text pairs from Wikipedia featured articles in 10 categories (art ... warfare; "
    "Rasiwasia et al. 2010): a 128-d SIFT bag of visual words of the image and 10-d LDA topic proportions of the "
    "text. The file's view_meaning names the 128-d view 'word' and the 10-d view 'SIFT', the reverse of the "
    "original release: the views are named by their dimensions.",
    "image+text", ["image", "text"], _cell(_D, 10) + "; view_meaning, class_meaning (not read)", _SOURCE_CZ)
_D = [(2708, "citation links: row of the symmetric adjacency matrix (cites or cited by)"),
      (1433, "words of the paper (binary bag of words)"),
      (2706, "citation links (a 2706-column link view)"),
      (2706, "citation links (a 2706-column link view; identical to the previous view in this file)")]
MvCora = _registered(
    "mv_cora", "Cora papers: content and citation links", "Cora.mat", "6c7ad492ef75f94035eec3bb374cd12c1f56e26db6b7ebcbf873e5863686336f", 7,
    _D, "Cora: 2708 machine-learning papers in 7 classes (McCallum et al. 2000, Sen et al. 2008), a word-content "
    "view and three citation-link views (rows of adjacency matrices). In this file view 0 is the 2708 x 2708 "
    "symmetric citation matrix (square: its rows are taken as the papers), view 1 the 1433-word content, and "
    "views 2 and 3 two 2706-column link views with identical values.",
    "other", ["cites", "content", "links_a", "links_b"], _cell(_D, 7) + " (view 0 square)", _SOURCE_CZ)
_D = [(1024, "image features of the bird photograph"), (300, "text features of the bird's descriptions")]
MvCub = _registered(
    "mv_cub", "CUB-200-2011 birds, 10 classes, image + text", "CUB.mat", "2fa9f3f4d75070470de6aeb8e91b51e825a5f3e4135c6baf943f73054ad60174", 10,
    _D, "CUB: a 10-class, 600-image subset of Caltech-UCSD Birds-200-2011 (Wah et al. 2011; 60 per class) with "
    "1024-d image features and 300-d text features of the birds' descriptions (Reed et al. 2016).",
    "image+text", ["image", "text"],
    "no cell: x1_train (480x1024), x2_train (480x300), gt_train (480x1), x1_test (120x1024), x2_test (120x300), "
    "gt_test (120x1): a shipped 480 / 120 train / test split (MATLAB v5)", _SOURCE_YZ, _SHIPPED)
_D = [(4659, "bag of words of segment 1 of the document"), (4633, "bag of words of segment 2"),
      (4665, "bag of words of segment 3"), (4684, "bag of words of segment 4")]
MvBbc = _registered(
    "mv_bbc", "BBC news, four segments per document", "BBC.mat", "d456d230e6b97167e2dc3a790e1745c092cd4dfffec84bea149c3c13fb5f94fe", 5,
    _D, "BBC: 685 BBC news documents in 5 topical classes (Greene and Cunningham 2006, "
    "http://mlg.ucd.ie/datasets/segment.html), each split into four segments, one bag-of-words view per segment "
    "(raw term counts).",
    "text", [f"segment{i}" for i in range(4)],
    "no cell, features x samples: x1..x4 (d_v x 685, uint8 counts); truelabel: 1x4 cell holding one identical "
    "1 x 685 label row per view (MATLAB v5)", _SOURCE_YZ)
_D = [(20, "image descriptor (20-d)"), (59, "image descriptor (59-d)"), (40, "image descriptor (40-d)")]
MvScene15 = _registered(
    "mv_scene15", "Scene-15 natural scene categories", "Scene15.mat", "52a71c6c675d5b0c1e07189778716bc52b972b17b58d8156c01422bcce2e4442", 15,
    _D, "Scene15: 4485 images of 15 natural scene categories (Lazebnik, Schmid and Ponce 2006; 210 to 410 per "
    "class), three image descriptors per scene (20-, 59- and 40-d; the file does not name them).",
    "image", ["descriptor0", "descriptor1", "descriptor2"],
    _cell(_D, 15, "d x N").replace("X: 3x1", "X: 1x3").replace("y: N x 1", "gt: N x 1"), _SOURCE_YZ)

#: every registered multi-view dataset and its modality family (image / text / image+text / other), for
#: rankings restricted to a family
FAMILIES = {c.id: c.MODALITY_FAMILY for c in (MvHandwritten, MvLeaves100, MvNgs, MvHw2sources, Mv3sources, MvMovies,
                                               MvWebkb, MvReuters1200, MvProkaryotic, MvProteinfold, MvWikipedia,
                                               MvCora, MvCub, MvBbc, MvScene15)}
