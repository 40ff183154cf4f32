"""Moved to :mod:`fusebench.geometry3d` (model-free box geometry); this alias keeps old imports working."""

from fusebench.geometry3d import (  # noqa: F401
    __all__,
    box_corners,
    box_corners_bev,
    nms_3d,
    paired_rotated_iou_3d,
    points_in_boxes,
    rotated_iou_3d,
)
