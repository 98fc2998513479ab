"""The packed batch layout: a few large tensors instead of one per feature.

A per-feature batch is ``{"dense": {name: ...}, "ids": {name: ...}, "weights": {name:
...}}``, one tensor per feature. Moving a batch onto an accelerator costs a transfer per
tensor, so a packed batch holds the same values side by side in (at most) three::

    {"dense":   float32 [B, n_dense],    # scalars (1 column) and vectors (length columns)
     "ids":     int32   [B, n_ids],      # single ids (1 column), multi-hot (max_len)
     "weights": float32 [B, n_weights]}  # one max_len block per multi-hot feature

A group with no columns is left out; labels are unchanged. A `PackedLayout` says where
each feature lives (name, offset, width), in schema order; it is derived from the schema
alone (`PackedLayout.from_schema`) and round-trips through JSON (`to_dict`/`from_dict`).

`unpack` slices a packed batch back into the per-feature structure with plain indexing
(``x[:, a]``, ``x[:, a:b]``), so it works on TensorFlow tensors, JAX arrays and numpy
arrays, inside ``tf.function(jit_compile=True)`` and ``jax.jit``. `UnpackFeatures` is the
same as a Keras 3 layer. The pipeline packs inside its parse map
(`tfinput.Pipeline.with_layout`), not in an extra pass.

This module imports TensorFlow only in `pack` and Keras only when `UnpackFeatures` is
first used.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tfinput._src.core.errors import ConfigError
from tfinput._src.core.schema import Categorical, Dense, MultiHot, Schema

if TYPE_CHECKING:  # pragma: no cover
    import tensorflow as tf

#: Format tag written by `PackedLayout.to_dict` and checked by `from_dict`.
LAYOUT_FORMAT = "tfinput.layout/1"
#: The packed groups, in order, with the dtype of each.
GROUPS = ("dense", "ids", "weights")
_DTYPES = {"dense": "float32", "ids": "int32", "weights": "float32"}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Slot:
    """Where one feature lives in its packed group.

    Attributes:
      name: The feature.
      offset: First column in the group's ``[B, n]`` tensor.
      width: Columns: 1 for a scalar or single id, ``length`` for a dense vector,
        ``max_len`` for multi-hot ids and weights.
      scalar: The per-feature tensor is ``[B]`` (a dense scalar or a single id), sliced
        with ``x[:, offset]``; otherwise it is ``[B, width]``, ``x[:, offset:offset+width]``.
    """

    name: str
    offset: int
    width: int
    scalar: bool = False

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "offset": self.offset,
            "width": self.width,
            "scalar": self.scalar,
        }


@dataclasses.dataclass(frozen=True, kw_only=True)
class PackedLayout:
    """Feature -> (offset, width) for each packed group, in schema order.

    Attributes:
      dense: Dense features (scalars width 1, vectors width ``length``).
      ids: Categorical (width 1) and multi-hot (width ``max_len``) features, in the
        schema's feature order.
      weights: Multi-hot features (width ``max_len``): the weights column, or 1 for
        every real id and 0 for padding when the feature has none.
    """

    dense: tuple[Slot, ...] = ()
    ids: tuple[Slot, ...] = ()
    weights: tuple[Slot, ...] = ()

    def __post_init__(self) -> None:
        for group in GROUPS:
            slots = tuple(getattr(self, group))
            object.__setattr__(self, group, slots)
            offset = 0
            names: set[str] = set()
            for i, s in enumerate(slots):
                where = f"PackedLayout.{group}[{i}]"
                if not isinstance(s, Slot):
                    raise ConfigError(f"{where}: expected a Slot, got {type(s).__name__}")
                if not isinstance(s.name, str) or not s.name or s.name in names:
                    raise ConfigError(f"{where}.name: expected a new feature name, got {s.name!r}")
                names.add(s.name)
                if isinstance(s.width, bool) or not isinstance(s.width, int) or s.width < 1:
                    raise ConfigError(f"{where}.width: expected an int >= 1, got {s.width!r}")
                if s.offset != offset or isinstance(s.offset, bool):
                    raise ConfigError(
                        f"{where}.offset: expected {offset} (slots are contiguous, in order), "
                        f"got {s.offset!r}"
                    )
                if s.scalar is not False and (s.scalar is not True or s.width != 1):
                    raise ConfigError(
                        f"{where}.scalar: expected false, or true with width 1, got "
                        f"{s.scalar!r} with width {s.width}"
                    )
                offset += s.width

    @property
    def n_dense(self) -> int:
        """Columns of the packed ``dense`` tensor."""
        return _width(self.dense)

    @property
    def n_ids(self) -> int:
        """Columns of the packed ``ids`` tensor."""
        return _width(self.ids)

    @property
    def n_weights(self) -> int:
        """Columns of the packed ``weights`` tensor."""
        return _width(self.weights)

    def widths(self) -> dict[str, int]:
        """``{group: columns}`` for the groups a packed batch holds (width > 0)."""
        return {g: _width(getattr(self, g)) for g in GROUPS if getattr(self, g)}

    def slot(self, group: str, name: str) -> Slot:
        """The slot of feature ``name`` in ``group``.

        Raises:
          ConfigError: no such group or feature.
        """
        if group not in GROUPS:
            raise ConfigError(f"group: expected one of {list(GROUPS)}, got {group!r}")
        for s in getattr(self, group):
            if s.name == name:
                return s
        raise ConfigError(f"PackedLayout.{group}: no feature {name!r}")

    # ------------------------------------------------------------ building
    @classmethod
    def from_schema(cls, schema: Schema) -> PackedLayout:
        """The layout of a schema's packed batches (what the pipeline emits).

        Args:
          schema: The schema.

        Returns:
          Dense scalars width 1, dense vectors width ``length``; categorical ids width 1;
          multi-hot ids and weights width ``max_len``.
        """
        if not isinstance(schema, Schema):
            raise ConfigError(f"schema: expected a tfinput.Schema, got {type(schema).__name__}")
        groups: dict[str, list[Slot]] = {g: [] for g in GROUPS}

        def add(group: str, name: str, width: int, scalar: bool) -> None:
            offset = _width(groups[group])
            groups[group].append(Slot(name=name, offset=offset, width=width, scalar=scalar))

        for f in schema.dense:
            add("dense", f.name, f.length or 1, f.length is None)
        for f in schema.categorical:
            if isinstance(f, MultiHot):
                add("ids", f.name, f.max_len, False)
            elif isinstance(f, Categorical):
                add("ids", f.name, 1, True)
        for f in schema.multi_hot:
            add("weights", f.name, f.max_len, False)
        for f in schema.features:
            if not isinstance(f, (Dense, Categorical, MultiHot)):  # pragma: no cover
                raise ConfigError(f"feature {f.name!r}: kind {type(f).__name__} cannot be packed")
        return cls(**{g: tuple(s) for g, s in groups.items()})

    # ---------------------------------------------------------------- JSON
    def to_dict(self) -> dict[str, object]:
        """A JSON-ready description: format, dtypes, widths and every slot."""
        return {
            "format": LAYOUT_FORMAT,
            "dtypes": dict(_DTYPES),
            "n_dense": self.n_dense,
            "n_ids": self.n_ids,
            "n_weights": self.n_weights,
            **{g: [s.to_dict() for s in getattr(self, g)] for g in GROUPS},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> PackedLayout:
        """Inverse of `to_dict`.

        Raises:
          ConfigError: not a layout description (wrong format, a slot's fields, offsets
            that are not contiguous, ``n_*`` that disagree with the slots).
        """
        if not isinstance(data, Mapping):
            raise ConfigError(f"layout: expected a JSON object, got {type(data).__name__}")
        if data.get("format") != LAYOUT_FORMAT:
            raise ConfigError(
                f"layout.format: expected {LAYOUT_FORMAT!r}, got {data.get('format')!r}"
            )
        groups: dict[str, tuple[Slot, ...]] = {}
        for g in GROUPS:
            items = data.get(g, [])
            if not isinstance(items, list):
                raise ConfigError(f"layout.{g}: expected a list of slots, got {items!r}")
            slots = []
            for i, item in enumerate(items):
                keys = {"name", "offset", "width", "scalar"}
                if not isinstance(item, Mapping) or not {"name", "offset", "width"} <= set(item):
                    raise ConfigError(
                        f"layout.{g}[{i}]: expected an object with name, offset, width "
                        f"(and scalar), got {item!r}"
                    )
                extra = set(item) - keys
                if extra:
                    raise ConfigError(f"layout.{g}[{i}]: unknown fields {sorted(extra)}")
                slots.append(Slot(**{k: item[k] for k in keys if k in item}))
            groups[g] = tuple(slots)
        layout = cls(**groups)
        for g in GROUPS:
            key = f"n_{g}"
            if key in data and data[key] != getattr(layout, key):
                raise ConfigError(
                    f"layout.{key}: expected {getattr(layout, key)} (the sum of the slot "
                    f"widths), got {data[key]!r}"
                )
        return layout

    def to_json(self, path: str | None = None) -> str:
        """The description as JSON text, also written to ``path`` when given."""
        text = json.dumps(self.to_dict(), indent=2) + "\n"
        if path is not None:
            with open(path, "w") as fh:
                fh.write(text)
        return text

    @classmethod
    def from_json(cls, path_or_text: str) -> PackedLayout:
        """Read `to_json`'s output from a file path or the JSON text itself."""
        from tfinput._src.core.options import load_json

        data, _ = load_json(path_or_text, ConfigError, "layout")
        return cls.from_dict(data)


def _width(slots: tuple[Slot, ...] | list[Slot]) -> int:
    return slots[-1].offset + slots[-1].width if slots else 0


# --------------------------------------------------------------- pack / unpack
def is_packed(features: object) -> bool:
    """Whether ``features`` is a packed batch (groups are arrays, not feature dicts)."""
    if not isinstance(features, Mapping):
        return False
    groups = [features[g] for g in GROUPS if g in features]
    return bool(groups) and not any(isinstance(v, Mapping) for v in groups)


@dataclasses.dataclass(frozen=True)
class Block:
    """Where a per-feature tensor already sits inside a larger tensor, so that packing
    can copy whole blocks instead of gathering features one by one.

    Attributes:
      tensor: ``[n, B]`` (``axis`` 0: one scalar feature per row, as the transforms check
        them) or ``[B, n, width]`` (``axis`` 1: one ``[B, width]`` slab per feature, such
        as the weight masks of multi-hot lists sharing ``max_len``).
      index: The feature's row (``axis`` 0) or slab (``axis`` 1).
      axis: 0 or 1, as above.
    """

    tensor: tf.Tensor
    index: int
    axis: int


def pack(
    features: Mapping[str, Mapping[str, tf.Tensor]],
    layout: PackedLayout,
    *,
    blocks: Mapping[tuple[str, str], Block] | None = None,
) -> dict[str, tf.Tensor]:
    """Concatenate per-feature tensors into the packed groups (TensorFlow ops).

    Called inside the pipeline's parse map by `tfinput.transforms.transform_batch`.

    Args:
      features: A per-feature batch from `tfinput.transforms.transform_batch` with the
        ``dense`` multi-hot format.
      layout: The schema's layout.
      blocks: ``{(group, name): Block}`` for features that already sit in a larger
        tensor (the transforms' checked matrices): consecutive slots from one block
        are copied as one transposed or reshaped slice. Must hold the same values as
        ``features``.

    Returns:
      ``{"dense": float32 [B, n_dense], "ids": int32 [B, n_ids], "weights": float32
      [B, n_weights]}``, without groups of width 0.

    Raises:
      ConfigError: a feature is missing, sparse or ragged (packing needs the ``dense``
        multi-hot format), has the wrong dtype or width.
    """
    import tensorflow as tf

    out: dict[str, tf.Tensor] = {}
    for group in GROUPS:
        slots = getattr(layout, group)
        if not slots:
            continue
        values = features.get(group, {})
        want = tf.as_dtype(_DTYPES[group])
        parts = []
        for s in slots:
            where = f"features[{group!r}][{s.name!r}]"
            if s.name not in values:
                raise ConfigError(f"{where}: missing; the packed layout expects it")
            v = values[s.name]
            if isinstance(v, (tf.SparseTensor, tf.RaggedTensor)):
                raise ConfigError(
                    f"{where}: a {type(v).__name__} cannot be packed; the packed layout "
                    'needs multi_hot_format "dense"'
                )
            v = tf.convert_to_tensor(v)
            if v.dtype != want:
                raise ConfigError(f"{where}: expected {want.name} to pack, got {v.dtype.name}")
            rank = 1 if s.scalar else 2
            width = 1 if s.scalar else v.shape[-1] if v.shape.rank == 2 else None
            if v.shape.rank != rank or width not in (s.width, None):
                shape = "[B]" if s.scalar else f"[B, {s.width}]"
                raise ConfigError(f"{where}: expected shape {shape} to pack, got {v.shape}")
            parts.append((s.scalar, v, (blocks or {}).get((group, s.name))))
        out[group] = _join(parts)
    return out


def _columns(run: list[tf.Tensor]) -> tf.Tensor:
    """``[B]`` tensors as the columns of one ``[B, n]`` tensor."""
    import tensorflow as tf

    return run[0][:, None] if len(run) == 1 else tf.transpose(tf.stack(run, axis=0))


def _slice(block: Block, start: int, stop: int) -> tf.Tensor:
    """Slabs ``start:stop`` of a block as ``[B, columns]``."""
    import tensorflow as tf

    whole = start == 0 and stop == block.tensor.shape[block.axis]
    if block.axis == 0:  # [n, B] -> [B, stop - start]
        return tf.transpose(block.tensor if whole else block.tensor[start:stop])
    x = block.tensor if whole else block.tensor[:, start:stop]  # [B, k, width]
    return tf.reshape(x, [-1, (stop - start) * x.shape[2]])


def _join(parts: list[tuple[bool, tf.Tensor, Block | None]]) -> tf.Tensor:
    """Columns side by side, cheaply, then one ``tf.concat``:

    - consecutive slots that sit in one `Block` in order are one slice of it
      (transposed or reshaped): nothing is gathered feature by feature;
    - other runs of scalars ``[B]`` become one ``[n, B]`` stack (contiguous copies)
      transposed to ``[B, n]``. On CPU, ``tf.stack(axis=1)`` (or an ``expand_dims`` per
      column and a concat) writes one strided element at a time and cost twice as much;
    - ``[B, w]`` tensors are joined as they are.
    """
    import tensorflow as tf

    out: list[tf.Tensor] = []
    run: list[tf.Tensor] = []  # scalars outside any block
    span: list[Any] = []  # [block, start, stop] of the current block run

    def flush() -> None:
        if run:
            out.append(_columns(run))
            run.clear()
        if span:
            out.append(_slice(*span))
            span.clear()

    for scalar, v, block in parts:
        if block is not None:
            same = span and span[0].tensor is block.tensor and span[0].axis == block.axis
            if same and span[2] == block.index:
                span[2] += 1
                continue
            flush()
            span.extend([block, block.index, block.index + 1])
            continue
        if span or (not scalar and run):
            flush()
        if scalar:
            run.append(v)
        else:
            out.append(v)
    flush()
    return out[0] if len(out) == 1 else tf.concat(out, axis=1)


def unpack(features: Mapping[str, Any], layout: PackedLayout) -> dict[str, dict[str, Any]]:
    """Slice a packed batch back into per-feature views.

    Plain indexing only, so it runs on TensorFlow tensors, JAX and numpy arrays and
    Keras tensors, inside ``tf.function(jit_compile=True)`` and ``jax.jit``.

    Args:
      features: A packed batch (a per-feature batch is returned unchanged).
      layout: The layout it was packed with (`PackedLayout.from_schema`).

    Returns:
      ``{"dense": {name: [B] or [B, length]}, "ids": {name: [B] or [B, max_len]},
      "weights": {name: [B, max_len]}}``, exactly the per-feature structure.

    Raises:
      ConfigError: a group the layout needs is missing, or narrower than the layout.
    """
    if not is_packed(features):
        if isinstance(features, Mapping) and all(
            isinstance(features.get(g, {}), Mapping) for g in GROUPS
        ):
            return features  # type: ignore[return-value]
        raise ConfigError(
            f"features: expected a packed batch (dict of {list(GROUPS)} arrays), got "
            f"{type(features).__name__}"
        )
    out: dict[str, dict[str, Any]] = {}
    for group in GROUPS:
        slots = getattr(layout, group)
        out[group] = {}
        if not slots:
            continue
        if group not in features:
            raise ConfigError(f"features[{group!r}]: missing; the layout has {len(slots)} slots")
        x = features[group]
        shape = getattr(x, "shape", None)
        n = _width(slots)
        if shape is not None and len(shape) == 2 and shape[1] is not None and shape[1] != n:
            raise ConfigError(
                f"features[{group!r}]: expected {n} columns for this layout, got {shape[1]}"
            )
        for s in slots:
            out[group][s.name] = x[:, s.offset] if s.scalar else x[:, s.offset : s.offset + s.width]
    return out


# ------------------------------------------------------------------ Keras layer
_LAYER: type | None = None


def _unpack_layer() -> type:
    """Define (once) and register the Keras layer; Keras is imported only here."""
    global _LAYER
    if _LAYER is not None:
        return _LAYER
    import keras

    @keras.saving.register_keras_serializable(package="tfinput")
    class UnpackFeatures(keras.layers.Layer):
        """A Keras 3 layer: packed batch in, per-feature dict out (see `unpack`).

        Args:
          layout: A `PackedLayout`, or its `PackedLayout.to_dict` description.
        """

        def __init__(self, layout: PackedLayout | Mapping[str, object], **kwargs: object):
            super().__init__(**kwargs)
            if not isinstance(layout, PackedLayout):
                layout = PackedLayout.from_dict(layout)
            self.layout = layout

        def call(self, features: Any) -> Any:
            return unpack(features, self.layout)

        def get_config(self) -> dict[str, object]:
            return {**super().get_config(), "layout": self.layout.to_dict()}

    UnpackFeatures.__module__ = __name__
    UnpackFeatures.__qualname__ = "UnpackFeatures"
    _LAYER = UnpackFeatures
    return UnpackFeatures


def __getattr__(name: str) -> object:
    if name == "UnpackFeatures":
        return _unpack_layer()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
