"""Tiny stand-ins for insightface's ONNX models, with the real models' interfaces, for offline tests.

`detector_model` mimics SCRFD (det_10g / det_500m): input "input.1" [1, 3, ?, ?]; 9 outputs,
scores (K, 1), boxes (K, 4) and keypoints (K, 10) at strides 8, 16 and 32, 2 anchors per cell,
rows ordered (y, x, anchor), distances in stride units, as insightface's SCRFD decodes them.
Every output is computed from the input (zero-weighted convolutions give a map of ones of the
stride's grid), so shapes follow any input size. It "finds" a face at each given stride-32
cell, whatever the image holds: the face count is baked into the file.

`recogniser_model` mimics w600k_r50 / w600k_mbf: input "input.1" [N, 3, 112, 112], one output
(N, 512): a fixed random projection of the 8x8-average-pooled input, so the same crop gives
the same vector and different crops give different ones.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 13
IR_VERSION = 8  # old enough for any onnxruntime that reads opset 13
STRIDES = (8, 16, 32)
ANCHORS = 2
FACE_STRIDE = 32
# insightface's ArcFace template: eyes, nose tip, mouth corners of a 112x112 aligned face.
ARCFACE_TEMPLATE = np.array([[38.2946, 51.6963], [73.5318, 51.5014], [56.0252, 71.7366],
                             [41.5493, 92.3655], [70.7299, 92.2041]], dtype=np.float32)


def face_box(cell: tuple[int, int], half: float) -> tuple[float, float, float, float]:
    """(x1, y1, x2, y2) in detector-input pixels of the face the detector reports at `cell`."""
    cx, cy = cell[0] * FACE_STRIDE, cell[1] * FACE_STRIDE  # SCRFD anchor centres sit at cell corners
    return cx - half * FACE_STRIDE, cy - half * FACE_STRIDE, cx + half * FACE_STRIDE, cy + half * FACE_STRIDE


def detector_model(cells: Sequence[tuple[int, int]], *, score: float = 0.9, half: float = 4.0,
                   batched: bool = False) -> onnx.ModelProto:
    """An SCRFD-shaped detector reporting one square face of side 2*half*32 px at each stride-32 cell."""
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    # Keypoints: the ArcFace template stretched over the box, relative to the anchor, in stride units.
    kps = (ARCFACE_TEMPLATE / 112.0 * 2.0 - 1.0) * half
    per_anchor = {"bbox": np.full(4, half, np.float32), "kps": kps.reshape(-1)}
    outputs: dict[str, list[str]] = {"score": [], "bbox": [], "kps": []}
    for stride in STRIDES:
        s = f"s{stride}"
        inits += [numpy_helper.from_array(np.zeros((1, 3, stride, stride), np.float32), f"{s}_w"),
                  numpy_helper.from_array(np.ones(1, np.float32), f"{s}_b")]
        nodes.append(helper.make_node("Conv", ["input.1", f"{s}_w", f"{s}_b"], [f"{s}_ones"],
                                      name=f"{s}_grid", kernel_shape=[stride, stride], strides=[stride, stride]))
        score_map = _score_map(nodes, inits, s, cells if stride == FACE_STRIDE else [], score)
        nodes.append(helper.make_node("Concat", [score_map] * ANCHORS, [f"{s}_score_map"], axis=1))
        maps = {"score": f"{s}_score_map"}
        for kind, values in per_anchor.items():
            inits.append(numpy_helper.from_array(np.tile(values, ANCHORS).reshape(1, -1, 1, 1), f"{s}_{kind}_c"))
            nodes.append(helper.make_node("Mul", [f"{s}_ones", f"{s}_{kind}_c"], [f"{s}_{kind}_map"]))
            maps[kind] = f"{s}_{kind}_map"
        for kind, width in (("score", 1), ("bbox", 4), ("kps", 10)):
            out = f"{kind}_{stride}"
            shape = [1, -1, width] if batched else [-1, width]
            inits.append(numpy_helper.from_array(np.array(shape, np.int64), f"{out}_shape"))
            nodes += [helper.make_node("Transpose", [maps[kind]], [f"{out}_nhwc"], perm=[0, 2, 3, 1]),
                      helper.make_node("Reshape", [f"{out}_nhwc", f"{out}_shape"], [out])]
            outputs[kind].append(out)
    names = outputs["score"] + outputs["bbox"] + outputs["kps"]
    widths = [1] * 3 + [4] * 3 + [10] * 3
    graph = helper.make_graph(
        nodes, "fake_scrfd",
        [helper.make_tensor_value_info("input.1", TensorProto.FLOAT, [1, 3, "?", "?"])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, ([1] if batched else []) + [f"k{n}", w])
         for n, w in zip(names, widths)],
        inits,
    )
    return _model(graph)


def _score_map(nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto], s: str,
               cells: Sequence[tuple[int, int]], score: float) -> str:
    """Name of a (1, 1, h, w) map: `score` at each cell of `cells`, 0 elsewhere."""
    inits.append(numpy_helper.from_array(np.array(score if cells else 0.0, np.float32), f"{s}_peak"))
    if not cells:
        nodes.append(helper.make_node("Mul", [f"{s}_ones", f"{s}_peak"], [f"{s}_score1"]))
        return f"{s}_score1"
    inits.append(numpy_helper.from_array(np.array(1.0, np.float32), f"{s}_one"))
    for axis, coord in ((3, "x"), (2, "y")):  # column / row index of every cell
        inits.append(numpy_helper.from_array(np.array(axis, np.int64), f"{s}_axis_{coord}"))
        nodes += [helper.make_node("CumSum", [f"{s}_ones", f"{s}_axis_{coord}"], [f"{s}_{coord}1"]),
                  helper.make_node("Sub", [f"{s}_{coord}1", f"{s}_one"], [f"{s}_{coord}"])]
    bumps = []
    for i, (cx, cy) in enumerate(cells):  # relu(1 - |x - cx| - |y - cy|) is 1 at the cell, 0 elsewhere
        f = f"{s}_f{i}"
        inits += [numpy_helper.from_array(np.array(cx, np.float32), f"{f}_cx"),
                  numpy_helper.from_array(np.array(cy, np.float32), f"{f}_cy")]
        nodes += [helper.make_node("Sub", [f"{s}_x", f"{f}_cx"], [f"{f}_dx"]),
                  helper.make_node("Abs", [f"{f}_dx"], [f"{f}_adx"]),
                  helper.make_node("Sub", [f"{s}_y", f"{f}_cy"], [f"{f}_dy"]),
                  helper.make_node("Abs", [f"{f}_dy"], [f"{f}_ady"]),
                  helper.make_node("Sub", [f"{s}_one", f"{f}_adx"], [f"{f}_r1"]),
                  helper.make_node("Sub", [f"{f}_r1", f"{f}_ady"], [f"{f}_r2"]),
                  helper.make_node("Relu", [f"{f}_r2"], [f"{f}_bump"])]
        bumps.append(f"{f}_bump")
    nodes += [helper.make_node("Sum", bumps, [f"{s}_bumps"]),
              helper.make_node("Mul", [f"{s}_bumps", f"{s}_peak"], [f"{s}_score1"])]
    return f"{s}_score1"


def recogniser_model(seed: int = 0, dim: int = 512) -> onnx.ModelProto:
    """An ArcFace-shaped recogniser: 8x8 average pool of the 112x112 crop, then a fixed random projection."""
    pooled = 3 * (112 // 8) ** 2
    projection = np.random.default_rng(seed).standard_normal((pooled, dim)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("AveragePool", ["input.1"], ["pooled"], name="pool", kernel_shape=[8, 8], strides=[8, 8]),
         helper.make_node("Flatten", ["pooled"], ["flat"], name="flatten", axis=1),
         helper.make_node("MatMul", ["flat", "projection"], ["683"], name="project")],
        "fake_arcface",
        [helper.make_tensor_value_info("input.1", TensorProto.FLOAT, ["None", 3, 112, 112])],
        [helper.make_tensor_value_info("683", TensorProto.FLOAT, ["None", dim])],
        [numpy_helper.from_array(projection, "projection")],
    )
    return _model(graph)


def _model(graph: onnx.GraphProto) -> onnx.ModelProto:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="biomem-tests")
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model, full_check=True)
    return model
