#!/usr/bin/env python3
"""Copy an ONNX export directory (model.onnx, config.json, tokenizer.json) with one defect.

    damage_onnx.py SRC_DIR OUT_DIR KIND

Edits go through the onnx package, so everything but the defect stays a valid model.
"""

import json
import os
import shutil
import sys

import onnx
from onnx import helper, numpy_helper


def first(graph, op_type):
    return next(n for n in graph.node if n.op_type == op_type)


def perm_attribute(node):
    return next(a for a in node.attribute if a.name == "perm")


def transpose_with_perm(graph, perm):
    return next(n for n in graph.node if n.op_type == "Transpose"
                and list(perm_attribute(n).ints) == perm)


def set_perm(node, perm):
    attribute = perm_attribute(node)
    del attribute.ints[:]
    attribute.ints.extend(perm)


def set_dims(tensor, dims):
    del tensor.dims[:]
    tensor.dims.extend(dims)


def set_constant(node, value):
    old = numpy_helper.to_array(node.attribute[0].t)
    node.attribute[0].t.CopyFrom(numpy_helper.from_array(old.dtype.type(value)))


def edit_config(out, **changes):
    path = os.path.join(out, "config.json")
    with open(path) as f:
        config = json.load(f)
    config.update(changes)
    with open(path, "w") as f:
        json.dump(config, f, indent=2)


def main():
    src, out, kind = sys.argv[1:4]
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(src, out)
    path = os.path.join(out, "model.onnx")
    if kind == "not-protobuf":
        with open(path, "w") as f:
            f.write("this is not an ONNX model\n")
        return
    if kind == "truncated":
        data = open(path, "rb").read()
        open(path, "wb").write(data[: len(data) * 3 // 5])
        return
    if kind == "no-config":
        os.remove(os.path.join(out, "config.json"))
        return
    if kind == "wrong-theta":
        edit_config(out, rope_theta=10000.0)
        return
    if kind == "wrong-mlp-size":
        edit_config(out, mlp_hidden_size=96)
        return
    if kind == "llada-config":  # a causal Llama graph described as (bidirectional) LLaDA
        with open(os.path.join(out, "config.json")) as f:
            llama = json.load(f)
        llada = {"architectures": ["LLaDAModelLM"], "d_model": llama["hidden_size"],
                 "n_heads": llama["num_attention_heads"],
                 "n_kv_heads": llama["num_key_value_heads"],
                 "n_layers": llama["num_hidden_layers"],
                 "mlp_hidden_size": llama["intermediate_size"],
                 "vocab_size": llama["vocab_size"], "embedding_size": llama["vocab_size"],
                 "rope_theta": llama["rope_theta"], "rms_norm_eps": llama["rms_norm_eps"],
                 "mask_token_id": llama["mask_token_id"], "eos_token_id": llama["eos_token_id"],
                 "max_sequence_length": llama["max_position_embeddings"]}
        with open(os.path.join(out, "config.json"), "w") as f:
            json.dump(llada, f, indent=2)
        return

    model = onnx.load(path)
    graph = model.graph
    external = False
    if kind == "unknown-op":
        first(graph, "Sigmoid").op_type = "Foo"
    elif kind == "custom-domain":
        node = first(graph, "Sigmoid")
        node.op_type, node.domain = "FastSigmoid", "com.example"
        model.opset_import.append(helper.make_opsetid("com.example", 1))
    elif kind == "missing-initializer":
        keep = [t for t in graph.initializer if t.name != "model.transformer.blocks.1.up_proj.weight"]
        del graph.initializer[:]
        graph.initializer.extend(keep)
    elif kind == "changed-head-copy":
        # A tied model exported with constant folding: its LM head reads its own transposed copy
        # of the embedding (onnx::MatMul_N, [hidden, rows]); one value of the copy changed.
        head = next(t for t in graph.initializer
                    if t.name.startswith("onnx::MatMul") and len(t.dims) == 2 and
                    t.dims[1] == next(e for e in graph.initializer
                                      if e.name.endswith("wte.weight")).dims[0])
        values = numpy_helper.to_array(head).copy()
        values[0, 0] += 1.0
        head.CopyFrom(numpy_helper.from_array(values, head.name))
    elif kind == "float-ids":
        graph.input[0].type.tensor_type.elem_type = onnx.TensorProto.FLOAT
    elif kind == "lower-triangular-mask":  # a user's inline mask built the wrong way round
        next(a for a in first(graph, "Trilu").attribute if a.name == "upper").i = 0
    elif kind == "batch-moving-transpose":
        # The attention's [1, heads, T, D] -> [1, T, heads, D] made [T, 1, heads, D]: the same
        # bytes, so the graph still computes, but the batch axis moves.
        last = [n for n in graph.node if n.op_type == "Transpose"
                and list(perm_attribute(n).ints) == [0, 2, 1, 3]][-1]
        set_perm(last, [2, 0, 1, 3])
    elif kind == "long-rope-tables":
        # Not damage: a buffers-style export of a long-context model, whose cos/sin tables (150000
        # positions) are too large to read whole; the import reads the rows it slices.
        import numpy as np
        with open(os.path.join(out, "config.json")) as f:
            theta = json.load(f)["rope_theta"]
        for table in graph.initializer:
            if table.name in ("rope_cache.cos", "rope_cache.sin"):
                width = table.dims[1]
                inv_freq = 1.0 / theta ** (np.arange(0, width, 2, dtype=np.float64) / width)
                angles = np.arange(150000, dtype=np.float64)[:, None] * inv_freq[None, :]
                angles = np.concatenate([angles, angles], axis=1)
                values = np.cos(angles) if table.name.endswith("cos") else np.sin(angles)
                table.CopyFrom(numpy_helper.from_array(values.astype(np.float32), table.name))
    elif kind == "batch-row-by-index":
        # Not damage: the one batch row picked by index as exporters write `x[0]` and `x[[-1]]`:
        # Gathers along the batch axis, of the logits (a scalar index: the output loses the axis)
        # and of the embeddings (a one-element index: the axis stays).
        import numpy as np
        nodes = list(graph.node)
        output = graph.output[0]
        embedding = next(n for n in nodes if n.op_type == "Gather"
                         and n.input[1] == graph.input[0].name)
        for value, index in ((output.name, np.array(0, np.int64)),
                             (embedding.output[0], np.array([-1], np.int64))):
            producer = next(n for n in nodes if value in n.output)
            batched = value + "/batched"
            producer.output[:] = [batched if o == value else o for o in producer.output]
            at = nodes.index(producer) + 1
            nodes[at:at] = [
                helper.make_node("Constant", [], [value + "/row"],
                                 value=numpy_helper.from_array(index)),
                helper.make_node("Gather", [batched, value + "/row"], [value], axis=0)]
        del output.type.tensor_type.shape.dim[0]
        del graph.node[:]
        graph.node.extend(nodes)
    elif kind == "cache-output":  # a use_cache=True export's first cache output
        key = transpose_with_perm(graph, [1, 0, 2]).output[0]
        graph.output.append(helper.make_tensor_value_info(key, onnx.TensorProto.FLOAT, None))
        graph.output[-1].name = key
        renamed = "present.0.key"
        for node in graph.node:
            node.output[:] = [renamed if o == key else o for o in node.output]
            node.input[:] = [renamed if i == key else i for i in node.input]
        graph.output[-1].name = renamed
    elif kind == "cache-input":  # an Optimum "with past" export's first cache input
        graph.input.append(helper.make_tensor_value_info(
            "past_key_values.0.key", onnx.TensorProto.FLOAT, [1, 2, "past", 16]))
    elif kind == "old-opset":
        model.opset_import[0].version = 9
    elif kind == "softmax-axis":
        next(a for a in first(graph, "Softmax").attribute if a.name == "axis").i = 1
    elif kind == "wrong-eps":
        eps = next(n for n in graph.node if n.op_type == "Constant"
                   and abs(float(numpy_helper.to_array(n.attribute[0].t)) - 1e-5) < 1e-9
                   if numpy_helper.to_array(n.attribute[0].t).size == 1)
        set_constant(eps, 1e-3)
    elif kind == "unsorted":
        node = graph.node[0]
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        del graph.node[0]
        graph.node.append(copy)
    elif kind == "overflowing-constant":
        # 2^120 elements wrap to 0 in int64, which the empty raw_data matches: before the checked
        # product this made a zero-byte attribute of a 2^120-element type.
        reshape = first(graph, "Reshape")
        target = next(n for n in graph.node if n.output[0] == reshape.input[1])
        set_dims(target.attribute[0].t, [2**40, 2**40, 2**40])
        target.attribute[0].t.raw_data = b""
    elif kind == "overflowing-initializer":
        weight = next(t for t in graph.initializer if t.name.endswith("attn_norm.weight"))
        set_dims(weight, [2**40, 2**40, 2**40])
    elif kind == "perm-out-of-range":
        # Behind a second Transpose, so the attention pattern composes the two perms: the 5 was
        # an index into the other perm.
        query = transpose_with_perm(graph, [1, 0, 2])
        inner = helper.make_node("Transpose", [query.input[0]], ["/InnerTranspose_output_0"],
                                 name="/InnerTranspose", perm=[0, 1, 2])
        query.input[0] = inner.output[0]
        graph.node.insert(list(graph.node).index(query), inner)
        set_perm(query, [5, 0, 1])
    elif kind == "perm-repeated-axis":
        set_perm(transpose_with_perm(graph, [1, 2, 0]), [1, 1, 0])
    elif kind == "perm-wrong-rank":
        set_perm(transpose_with_perm(graph, [1, 0]), [1, 0, 2])
    elif kind == "rank0-rope-source":
        # value_info is a hint the file gives: a rank-0 type on the tensor RoPE slices (and on the
        # RMSNorm input) used to reach a pattern's last-axis lookup (an assertion).
        graph.value_info.append(helper.make_tensor_value_info(
            first(graph, "Slice").input[0], onnx.TensorProto.FLOAT, []))
    elif kind == "rank0-norm-input":
        graph.value_info.append(helper.make_tensor_value_info(
            first(graph, "Pow").input[0], onnx.TensorProto.FLOAT, []))
    elif kind == "overflowing-value-info":
        graph.value_info.append(helper.make_tensor_value_info(
            first(graph, "MatMul").output[0], onnx.TensorProto.FLOAT, [2**40, 2**40, 2**40]))
    elif kind in ("external-data", "external-truncated"):
        external = True
    else:
        raise SystemExit(f"unknown damage {kind!r}")
    if external:
        onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
                        location="weights.bin", size_threshold=0)
        if kind == "external-truncated":
            bin_path = os.path.join(out, "weights.bin")
            data = open(bin_path, "rb").read()
            open(bin_path, "wb").write(data[: len(data) // 2])
    else:
        onnx.save_model(model, path)


if __name__ == "__main__":
    main()
