"""Page similarity: the CLIP path (on seeded random weights saved to local files), the pixel fallback, win rate.

No pretrained CLIP weights exist on these machines, so the CLIP tests check the loading and scoring machinery, not
the quality of the embeddings: a randomly initialised model written to a file and read back through the same code.
"""
import io
import math
import time

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw

from sweet.colbench.similarity import (
    ClipSimilarity, PixelSimilarity, Score, load_image, make_similarity, win_rate)

# A tiny open_clip config (170k parameters) standing in for ViT-B-32 in the fast tests.
TINY = dict(embed_dim=32, vision_cfg=dict(image_size=64, layers=2, width=64, patch_size=16, head_width=32),
            text_cfg=dict(context_length=16, vocab_size=100, width=32, heads=2, layers=1))


def page(layout="cards", header=(30, 64, 175), accent=(219, 234, 254), bg="white", text=(40, 40, 40), shift=0,
         size=(640, 900)) -> Image.Image:
    """A schematic web page: a header bar, a body in one of two layouts, a footer."""
    im = Image.new("RGB", size, bg)
    d = ImageDraw.Draw(im)
    w, h = size
    d.rectangle([0, 0, w, 70], fill=header)
    for i in range(4):
        d.rectangle([w - 300 + i * 70, 28, w - 250 + i * 70, 42], fill="white")
    if layout == "cards":
        d.rectangle([40 + shift, 110, w - 40 + shift, 330], fill=accent)
        for j in range(6):
            d.rectangle([80 + shift, 150 + j * 25, 400 + shift - j * 30, 162 + j * 25], fill=text)
        for c in range(3):
            x = 40 + c * ((w - 80) // 3) + shift
            d.rectangle([x + 8, 370, x + (w - 80) // 3 - 8, 620], outline=text, fill=accent)
            for j in range(5):
                d.rectangle([x + 24, 400 + j * 30, x + 150, 410 + j * 30], fill=text)
    else:  # sidebar and a list of rows
        d.rectangle([0, 70, 180, h], fill=accent)
        for j in range(10):
            d.rectangle([20, 100 + j * 40, 150, 114 + j * 40], fill=text)
        for r in range(12):
            d.rectangle([220, 110 + r * 55, w - 40, 140 + r * 55], outline=text)
            d.rectangle([240, 120 + r * 55, 420, 130 + r * 55], fill=text)
    d.rectangle([0, h - 80, w, h], fill=header)
    return im


def png(im: Image.Image) -> bytes:
    buf = io.BytesIO()
    im.save(buf, "PNG")
    return buf.getvalue()


REF = png(page())
RECOLOURED = png(page(header=(190, 18, 60), accent=(255, 228, 230)))
SHIFTED = png(page(shift=8))
OTHER_LAYOUT = png(page("sidebar"))
BLANK = png(Image.new("RGB", (640, 900), "white"))


# ------------------------------------------------------------------------------------------------ CLIP
def _save(model, path):
    if path.suffix == ".safetensors":
        from safetensors.torch import save_file
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    else:
        torch.save(model.state_dict(), str(path))
    return path


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    import open_clip
    torch.manual_seed(0)
    model, _, preprocess = open_clip.create_model_and_transforms("ViT-B-32", pretrained=None, force_quick_gelu=True,
                                                                 **TINY)
    d = tmp_path_factory.mktemp("clip")
    return model.eval(), preprocess, _save(model, d / "tiny.safetensors"), _save(model, d / "tiny.pt")


def test_clip_loads_local_file_and_scores(tiny):
    model, preprocess, st, _ = tiny
    sim = ClipSimilarity(str(st), **TINY)
    assert sim.metric == "clip-vit-b-32-custom"  # not the real architecture: the name says so
    # the file's weights were loaded: the embedding is the saved model's own
    with torch.no_grad():
        ref = model.encode_image(preprocess(load_image(REF)).unsqueeze(0), normalize=True)[0].numpy()
    np.testing.assert_allclose(sim.embed([REF])[0], ref, atol=1e-5)
    assert sim.score(REF, REF) == pytest.approx(1.0, abs=1e-5)
    assert sim.score(REF, png(page())) == pytest.approx(1.0, abs=1e-5)  # same pixels, other bytes
    other = sim.score(REF, OTHER_LAYOUT)
    assert -1.0 <= other < 1.0 - 1e-4
    assert sim.score_with_metric(REF, OTHER_LAYOUT) == Score(other, "clip-vit-b-32-custom")


def test_clip_batch_equals_singles_and_pt_equals_safetensors(tiny):
    _, _, st, pt = tiny
    pairs = [(REF, REF), (REF, OTHER_LAYOUT), (SHIFTED, BLANK), (OTHER_LAYOUT, None), (page(), RECOLOURED)]
    a = ClipSimilarity(str(st), batch_size=3, **TINY)
    batch = a.score_many(pairs)
    singles = [ClipSimilarity(str(st), **TINY).score(x, y) for x, y in pairs]
    np.testing.assert_allclose(batch, singles, atol=1e-6)
    np.testing.assert_allclose(ClipSimilarity(str(pt), **TINY).score_many(pairs), batch, atol=1e-6)
    assert a.score_many([]) == []


def test_clip_failed_render_is_a_black_image(tiny):
    sim = ClipSimilarity(str(tiny[2]), **TINY)
    black = png(Image.new("RGB", (224, 224), "black"))
    assert sim.score(REF, None) == pytest.approx(sim.score(REF, black), abs=1e-6)


def test_clip_weight_errors(tiny, tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        ClipSimilarity(str(tmp_path / "missing.safetensors"))
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="cannot read CLIP weights file"):
        ClipSimilarity(str(junk))
    # tiny weights into the real architecture: a strict load fails, naming the weights
    with pytest.raises(RuntimeError, match="cannot load CLIP ViT-B-32 weights .*tiny.safetensors"):
        ClipSimilarity(str(tiny[2]))


def test_clip_pretrained_tag_goes_to_open_clip(monkeypatch):
    import open_clip
    calls = []

    def fake(name, pretrained=None, **kw):
        calls.append((name, pretrained, kw))
        raise RuntimeError("Failed to download weights for tag 'openai'")
    monkeypatch.setattr(open_clip, "create_model_and_transforms", fake)
    with pytest.raises(RuntimeError, match="cannot load CLIP ViT-B-32 weights 'openai'.*'pixel'"):
        make_similarity("clip:openai")
    assert calls == [("ViT-B-32", "openai", {"force_quick_gelu": True})]


def test_real_vit_b_32_loads_a_saved_state_dict(tmp_path):
    """The paper's architecture, randomly initialised (seeded), saved and read back through make_similarity."""
    import open_clip
    t0 = time.time()
    torch.manual_seed(0)
    model, _, preprocess = open_clip.create_model_and_transforms("ViT-B-32", pretrained=None, force_quick_gelu=True)
    path = _save(model.eval(), tmp_path / "vit-b-32.safetensors")
    sim = make_similarity(f"clip:{path}")
    assert sim.metric == "clip-vit-b-32"
    with torch.no_grad():
        ref = model.encode_image(preprocess(load_image(REF)).unsqueeze(0), normalize=True)[0].numpy()
    np.testing.assert_allclose(sim.embed([REF])[0], ref, atol=1e-5)
    assert sim.score(REF, REF) == pytest.approx(1.0, abs=1e-5)
    assert sim.score(REF, OTHER_LAYOUT) < 1.0 - 1e-4
    assert time.time() - t0 < 120


def test_hugging_face_checkpoint_loads_into_the_vision_tower(tmp_path):
    """A CLIPModel checkpoint (the official evaluation's `openai/clip-vit-base-patch32` format), text keys included."""
    from safetensors.torch import save_file
    from transformers import CLIPVisionConfig, CLIPVisionModelWithProjection
    torch.manual_seed(0)
    hf = CLIPVisionModelWithProjection(CLIPVisionConfig()).eval()
    state = {k: v.contiguous() for k, v in hf.state_dict().items()}
    state["text_model.final_layer_norm.weight"] = torch.ones(512)
    state["logit_scale"] = torch.tensor(2.6592)
    save_file(state, str(tmp_path / "model.safetensors"))
    sim = ClipSimilarity(str(tmp_path / "model.safetensors"))
    assert sim.metric == "clip-vit-b-32"
    x = sim.preprocess(load_image(REF)).unsqueeze(0)
    with torch.no_grad():
        e = hf(pixel_values=x).image_embeds[0]
    np.testing.assert_allclose(sim.embed([REF])[0], (e / e.norm()).numpy(), atol=1e-5)
    assert sim.score(REF, REF) == pytest.approx(1.0, abs=1e-5)
    del state["vision_model.post_layernorm.weight"]
    save_file(state, str(tmp_path / "broken.safetensors"))
    with pytest.raises(ValueError, match="lacks"):
        ClipSimilarity(str(tmp_path / "broken.safetensors"))


# ------------------------------------------------------------------------------------------------ pixel fallback
def test_pixel_metric_orders_pages_sensibly():
    s = PixelSimilarity()
    assert s.metric == "pixel-ssim+edges+colour-256" and "clip" not in s.metric
    same = s.score(REF, png(page()))
    recoloured, shifted = s.score(REF, RECOLOURED), s.score(REF, SHIFTED)
    other, other_recoloured = s.score(REF, OTHER_LAYOUT), s.score(REF, png(page("sidebar", header=(190, 18, 60))))
    blank, failed = s.score(REF, BLANK), s.score(REF, None)
    assert same == pytest.approx(1.0, abs=1e-9)
    assert 1.0 > recoloured > other and 1.0 > shifted > other  # same layout beats another layout
    assert other > other_recoloured  # a wrong palette costs on top of a wrong layout
    assert other > blank > failed  # an empty page is worse than a wrong one; a failed render worst
    assert blank < 0.5
    assert all(-1.0 <= v <= 1.0 for v in (recoloured, shifted, other, blank, failed))


def test_pixel_metric_is_symmetric_deterministic_and_batched(tmp_path):
    s = PixelSimilarity()
    pairs = [(REF, RECOLOURED), (OTHER_LAYOUT, REF), (BLANK, SHIFTED)]
    batch = s.score_many(pairs)
    assert batch == [s.score(a, b) for a, b in pairs] == PixelSimilarity().score_many(pairs)
    assert s.score(RECOLOURED, REF) == pytest.approx(batch[0], abs=1e-12)
    # bytes, PIL images and paths are the same input
    (tmp_path / "ref.png").write_bytes(REF)
    assert s.score(page(), tmp_path / "ref.png") == pytest.approx(1.0, abs=1e-9)
    assert s.score_with_metric(REF, RECOLOURED) == Score(batch[0], s.metric)
    # pages of different height are compared top-aligned: extra length costs a little, not everything
    longer = s.score(REF, png(page(size=(640, 1100))))
    assert batch[0] > 0 and 0.7 < longer < 1.0
    with pytest.raises(TypeError, match="PNG bytes"):
        s.score(REF, 42)


def test_pixel_metric_is_fast():
    s = PixelSimilarity()
    big = png(page(size=(1280, 3000)))
    t0 = time.time()
    s.score_many([(big, REF)] * 5)
    assert (time.time() - t0) / 5 < 1.0


# ------------------------------------------------------------------------------------------------ make_similarity
def test_make_similarity_specs(tiny):
    assert isinstance(make_similarity(), PixelSimilarity) and isinstance(make_similarity("pixel"), PixelSimilarity)
    clip = make_similarity(f"clip:{tiny[2]}", **TINY)
    assert isinstance(clip, ClipSimilarity) and clip.weights == str(tiny[2])
    for bad in ("", "clip", "clip:", "clip:  ", "CLIP:openai", "ssim"):
        with pytest.raises(ValueError, match="unknown similarity"):
            make_similarity(bad)
    with pytest.raises(ValueError, match="takes no options"):
        make_similarity("pixel", device="cuda")


# ------------------------------------------------------------------------------------------------ win rate
def test_win_rate_by_hand():
    system = {"a": 0.9, "b": 0.5, "c": 0.7, "d": 0.1}
    baseline = {"a": 0.8, "b": 0.6, "c": 0.7, "e": 0.3}
    r = win_rate(system, baseline)
    assert (r["wins"], r["ties"], r["losses"], r["n"]) == (1, 1, 1, 3)
    assert r["win_rate"] == pytest.approx(0.5)  # (1 + 0.5 * 1) / 3
    assert (r["only_system"], r["only_baseline"], r["ties_count"]) == (1, 1, 0.5)
    lo, hi = r["ci95"]
    # Wilson interval at p = 0.5, n = 3: 0.5 -+ 1.96 * sqrt(0.25/3 + 1.96^2/36) / (1 + 1.96^2/3)
    half = 1.959964 * math.sqrt(0.25 / 3 + 1.959964 ** 2 / 36) / (1 + 1.959964 ** 2 / 3)
    assert (lo, hi) == pytest.approx((0.5 - half, 0.5 + half), abs=1e-6)
    assert (lo, hi) == pytest.approx((0.1253, 0.8747), abs=1e-4)


def test_win_rate_all_wins_ties_and_errors():
    r = win_rate({str(i): 0.9 for i in range(10)}, {str(i): 0.1 for i in range(10)})
    assert r["win_rate"] == 1.0 and r["ci95"][1] == pytest.approx(1.0, abs=1e-12)
    assert r["ci95"][0] == pytest.approx(10 / (10 + 1.959964 ** 2), abs=1e-6)  # Wilson lower bound at p = 1
    close = win_rate({"a": 0.801, "b": 0.5}, {"a": 0.8, "b": 0.2}, tie_tol=0.01)
    assert (close["wins"], close["ties"], close["win_rate"]) == (1, 1, 0.75)
    with pytest.raises(ValueError, match="share no task id"):
        win_rate({"a": 1.0}, {"b": 1.0})
    with pytest.raises(ValueError, match="NaN"):
        win_rate({"a": float("nan")}, {"a": 0.2})
