"""Page similarity for frontend rewards: CLIP image-embedding cosine (the paper's metric) and a named pixel fallback.

The paper's reward is the cosine of CLIP ViT-B/32 image embeddings of the agent's page and the reference page (the
official evaluation loads `openai/clip-vit-base-patch32`; a page that did not render is scored as a black 224x224
image, and so is `None` here). `ClipSimilarity` builds open_clip's `ViT-B-32` (QuickGELU, as OpenAI trained it) from a
pretrained tag ("openai", needs the hub) or a local weights file: an open_clip/OpenAI state dict (`.pt`, `.bin`,
`.safetensors`) or a Hugging Face `CLIPModel` checkpoint (keys `vision_model.*`, e.g. the `model.safetensors` of
`openai/clip-vit-base-patch32`), which loads into transformers' vision tower. No pretrained CLIP weights are reachable
on these machines, so the default is `PixelSimilarity`, which is not CLIP: every score travels with its metric name.
"""

from __future__ import annotations

import hashlib
import io
from abc import ABC, abstractmethod
import math
from pathlib import Path
from typing import NamedTuple

import numpy as np
from PIL import Image

DEFAULT_SIMILARITY = "pixel"
WEIGHT_SUFFIXES = (".pt", ".pth", ".bin", ".safetensors")


class Score(NamedTuple):
    value: float
    metric: str


def load_image(img) -> Image.Image:
    """PNG bytes, a path, or a PIL image as RGB; None (a page that did not render) is a black 224x224 image."""
    if img is None:
        return Image.new("RGB", (224, 224), "black")
    if isinstance(img, Image.Image):
        return img.convert("RGB")
    if isinstance(img, (bytes, bytearray)):
        return Image.open(io.BytesIO(img)).convert("RGB")
    if isinstance(img, (str, Path)):
        return Image.open(img).convert("RGB")
    raise TypeError(f"expected PNG bytes, a path, a PIL image or None, got {type(img).__name__}")


class Similarity(ABC):
    """An image similarity with a name (`metric`) stored next to every score it gives."""
    metric: str = "?"

    @abstractmethod
    def score_many(self, pairs) -> list[float]:
        """One score per (image, image) pair."""

    def score(self, a, b) -> float:
        return self.score_many([(a, b)])[0]

    def score_with_metric(self, a, b) -> Score:
        return Score(self.score(a, b), self.metric)


class ClipSimilarity(Similarity):
    """Cosine of CLIP image embeddings. `weights`: an open_clip pretrained tag ("openai") or a local file. `arch`
    overrides open_clip's model config (e.g. a tiny `vision_cfg` in tests); the metric name then says so."""

    def __init__(self, weights: str, *, model_name: str = "ViT-B-32", quick_gelu: bool = True, device: str = "cpu",
                 batch_size: int = 32, **arch):
        import open_clip
        import torch

        self.weights, self.device, self.batch_size, self._cache = str(weights), device, batch_size, {}
        slug = model_name.lower().replace("/", "-")
        self.metric = f"clip-{slug}" + ("-custom" if arch or not quick_gelu else "")
        path = Path(self.weights).expanduser()
        is_file = path.suffix in WEIGHT_SUFFIXES or path.exists() or "/" in self.weights
        if is_file and not path.is_file():
            raise FileNotFoundError(f"CLIP weights file {self.weights!r} does not exist")
        state = None
        if is_file:
            from open_clip.factory import load_state_dict
            try:
                state = load_state_dict(str(path), weights_only=True)
            except Exception as e:  # noqa: BLE001 - any unreadable file gets one error naming it
                raise ValueError(f"cannot read CLIP weights file {path}: {type(e).__name__}: {e}") from e
        if state is not None and any(k.startswith("vision_model.") for k in state):
            if model_name != "ViT-B-32" or arch:
                raise ValueError("a Hugging Face CLIP checkpoint loads only as the default ViT-B-32 (no arch overrides)")
            from transformers import CLIPVisionConfig, CLIPVisionModelWithProjection

            model = CLIPVisionModelWithProjection(CLIPVisionConfig())  # defaults = clip-vit-base-patch32's vision tower
            own = model.state_dict()
            missing = [k for k in own if k not in state and not k.endswith("position_ids")]
            if missing:
                raise ValueError(f"{path}: Hugging Face CLIP checkpoint lacks {missing[:3]} ({len(missing)} keys)")
            model.load_state_dict({k: v for k, v in state.items() if k in own}, strict=False)
            self._encode = lambda x: model(pixel_values=x).image_embeds
            preprocess = open_clip.image_transform(224, is_train=False)  # OpenAI mean/std, bicubic, centre crop
        else:
            del state  # open_clip reads the file itself (and converts OpenAI/JIT checkpoints)
            try:
                model, _, preprocess = open_clip.create_model_and_transforms(
                    model_name, pretrained=str(path) if is_file else self.weights, force_quick_gelu=quick_gelu, **arch)
            except Exception as e:  # noqa: BLE001 - open_clip raises RuntimeError, AssertionError, KeyError...
                raise RuntimeError(f"cannot load CLIP {model_name} weights {self.weights!r}: {e}. Offline, pass a local "
                                   f".pt/.safetensors file, or use the 'pixel' similarity") from e
            self._encode = model.encode_image
        self.model, self.preprocess, self._torch = model.to(device).eval(), preprocess, torch

    def embed(self, images) -> np.ndarray:
        """Unit-norm embeddings (one row per image); embeddings of PNG bytes already seen are reused."""
        keys = [hashlib.sha1(i).hexdigest() if isinstance(i, (bytes, bytearray)) else None for i in images]
        todo = [j for j, k in enumerate(keys) if k is None or k not in self._cache]
        new = {}
        for s in range(0, len(todo), self.batch_size):
            idx = todo[s:s + self.batch_size]
            x = self._torch.stack([self.preprocess(load_image(images[j])) for j in idx]).to(self.device)
            with self._torch.no_grad():
                e = self._encode(x).float()
            e = (e / e.norm(dim=-1, keepdim=True)).cpu().numpy()
            new.update(zip(idx, e))
        if len(self._cache) > 2048:
            self._cache.clear()
        self._cache.update({keys[j]: v for j, v in new.items() if keys[j] is not None})
        return np.stack([new[j] if j in new else self._cache[keys[j]] for j in range(len(images))])

    def score_many(self, pairs) -> list[float]:
        pairs = list(pairs)
        if not pairs:
            return []
        e = self.embed([a for a, _ in pairs] + [b for _, b in pairs])
        n = len(pairs)
        return [float(np.clip(np.dot(e[i], e[n + i]), -1.0, 1.0)) for i in range(n)]


class PixelSimilarity(Similarity):
    """Not CLIP: a deterministic screenshot similarity from pixels alone (numpy + PIL).

    Both pages are scaled to width 256 (aspect kept), padded at the bottom with white to the same height (pages are
    top-aligned), then squashed to 256x256. score = ssim/4 + edges/2 + colour/4, each term 1.0 for identical pages:
      ssim   mean SSIM of the grey images (8x8 box windows, the usual constants): layout and text placement;
      edges  cosine of the Sobel gradient-magnitude maps, blurred over 9x9 pixels (tolerates small shifts);
             0 when exactly one page has no edges (a blank page against content), 1 when neither has;
      colour histogram intersection of the joint RGB histograms (8 bins per channel): the palette.
    Edges weigh most so that an empty page scores below a wrong but real one. On the bundled pages rendered at
    1280 px: palette families swapped ~0.95, grids/flex rows collapsed ~0.70, another page ~0.41, blank ~0.32.
    """

    metric = "pixel-ssim+edges+colour-256"
    SIZE = 256

    def _prep(self, a: Image.Image, b: Image.Image) -> tuple[np.ndarray, np.ndarray]:
        w = self.SIZE
        a, b = (im.resize((w, max(1, round(im.height * w / im.width))), Image.BILINEAR) for im in (a, b))
        h = max(a.height, b.height)
        out = []
        for im in (a, b):
            canvas = Image.new("RGB", (w, h), "white")
            canvas.paste(im, (0, 0))
            out.append(np.asarray(canvas.resize((w, w), Image.BILINEAR), dtype=np.float64))
        return out[0], out[1]

    def score_many(self, pairs) -> list[float]:
        return [self._score(load_image(a), load_image(b)) for a, b in pairs]

    def _score(self, a: Image.Image, b: Image.Image) -> float:
        x, y = self._prep(a, b)
        gx, gy = (m @ np.array([0.299, 0.587, 0.114]) for m in (x, y))
        ssim = _ssim(gx, gy)
        ex, ey = (_box(_sobel(g), 9) for g in (gx, gy))
        nx, ny = np.linalg.norm(ex), np.linalg.norm(ey)
        edges = 1.0 if nx < 1e-9 and ny < 1e-9 else 0.0 if nx < 1e-9 or ny < 1e-9 else float((ex * ey).sum() / (nx * ny))
        hx, hy = (_hist(m) for m in (x, y))
        colour = float(np.minimum(hx, hy).sum())
        return float(np.clip(0.25 * ssim + 0.5 * edges + 0.25 * colour, -1.0, 1.0))


def _box(img: np.ndarray, k: int) -> np.ndarray:
    """Mean over k x k windows ('valid' positions), by 2-D cumulative sums."""
    c = np.pad(img, ((1, 0), (1, 0))).cumsum(0).cumsum(1)
    return (c[k:, k:] - c[:-k, k:] - c[k:, :-k] + c[:-k, :-k]) / (k * k)


def _ssim(x: np.ndarray, y: np.ndarray, k: int = 8) -> float:
    c1, c2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2
    mx, my = _box(x, k), _box(y, k)
    vx, vy, cxy = _box(x * x, k) - mx * mx, _box(y * y, k) - my * my, _box(x * y, k) - mx * my
    s = ((2 * mx * my + c1) * (2 * cxy + c2)) / ((mx * mx + my * my + c1) * (vx + vy + c2))
    return float(s.mean())


def _sobel(g: np.ndarray) -> np.ndarray:
    p = np.pad(g, 1, mode="edge")
    dx = (p[:-2, 2:] + 2 * p[1:-1, 2:] + p[2:, 2:]) - (p[:-2, :-2] + 2 * p[1:-1, :-2] + p[2:, :-2])
    dy = (p[2:, :-2] + 2 * p[2:, 1:-1] + p[2:, 2:]) - (p[:-2, :-2] + 2 * p[:-2, 1:-1] + p[:-2, 2:])
    return np.hypot(dx, dy)


def _hist(rgb: np.ndarray, bins: int = 8) -> np.ndarray:
    q = np.minimum((rgb / 256.0 * bins).astype(int), bins - 1)
    idx = (q[..., 0] * bins + q[..., 1]) * bins + q[..., 2]
    h = np.bincount(idx.ravel(), minlength=bins ** 3).astype(np.float64)
    return h / h.sum()


def make_similarity(spec: str = DEFAULT_SIMILARITY, **kw) -> Similarity:
    """'pixel' (default), 'clip:openai' (a pretrained tag; needs the hub) or 'clip:/path/to/weights.safetensors'."""
    spec = (spec or "").strip()
    if spec == "pixel":
        if kw:
            raise ValueError(f"the pixel similarity takes no options (got {sorted(kw)})")
        return PixelSimilarity()
    if spec.startswith("clip:") and spec[5:].strip():
        return ClipSimilarity(spec[5:].strip(), **kw)
    raise ValueError(f"unknown similarity {spec!r}: use 'pixel', 'clip:<pretrained tag>' (e.g. clip:openai) "
                     f"or 'clip:<path to a .pt/.safetensors file>'")


def win_rate(scores_system: dict, scores_baseline: dict, tie_tol: float = 0.0) -> dict:
    """Share of the tasks scored for both where the system's page is strictly closer to the reference than the
    baseline's (the paper: vs GPT-4o's pages). Ties (|difference| <= tie_tol) count half. `ci95` is the Wilson score
    interval at the tie-adjusted rate; tasks scored by one side only are counted, not used."""
    common = sorted(set(scores_system) & set(scores_baseline))
    if not common:
        raise ValueError("win_rate: the two score sets share no task id")
    d = np.array([float(scores_system[t]) - float(scores_baseline[t]) for t in common])
    if not np.isfinite(d).all():
        raise ValueError("win_rate: a score is NaN or infinite")
    wins, ties = int((d > tie_tol).sum()), int((np.abs(d) <= tie_tol).sum())
    n = len(common)
    p = (wins + 0.5 * ties) / n
    z = 1.959963984540054
    centre, half = (p + z * z / (2 * n)) / (1 + z * z / n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return {"win_rate": p, "wins": wins, "ties": ties, "losses": n - wins - ties, "n": n,
            "ci95": (max(0.0, centre - half), min(1.0, centre + half)), "ties_count": 0.5,
            "only_system": len(set(scores_system) - set(scores_baseline)),
            "only_baseline": len(set(scores_baseline) - set(scores_system))}
