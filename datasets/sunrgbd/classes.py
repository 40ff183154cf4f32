"""The 10 VoteNet / mmdet3d SUN RGB-D classes (ids 0..9 in this order, as in the mmdet3d infos).

The single definition of the class list: the adapter, :mod:`fusebench.metrics.detection` and
:mod:`fusebench.encoders.votenet` (``SUNRGBD_CLASSES``) import it from here.
"""

from __future__ import annotations

#: the 10 VoteNet / mmdet3d SUN RGB-D classes; label id = position
CLASSES = ("bed", "table", "sofa", "chair", "toilet", "desk", "dresser", "night_stand", "bookshelf", "bathtub")
CLASS_TO_ID = {c: i for i, c in enumerate(CLASSES)}

__all__ = ["CLASSES", "CLASS_TO_ID"]
