"""Vision-language critic (`critic.kind=vlm`): the paper's frontend critic, a Qwen2-VL with a scalar regression head
that reads the dialogue and the rendered pages.

The value head's idea (`value_head.py`) on a Qwen2-VL base: an fp32 linear head (zero weights, bias = the mean
reward) on the language model's last hidden states, mean-pooled over each assistant action's tokens, regressed (MSE)
on the trajectory's final reward, one example per assistant turn. What differs is the input:

* each assistant turn whose text holds a page is followed, inside the turn, by that page's screenshot
  (`<|vision_start|><|image_pad|>...<|vision_end|>`, then the end-of-turn token), so the pooled span covers the
  action's text *and* what it renders: the outcome the reward compares, which a causal model could not see if it
  came after the span;
* with `use_training_info`, c is the reference page's screenshot, in the system message (not its HTML text: the
  reward compares pictures, and the text would cost ~1k tokens a page).

Screenshots come in as PNG bytes (the stage renders them: `colbench.frontend.PageScreens`); each is resized once to
the processor's size (Qwen2-VL's `smart_resize`, at most `critic.image_max_pixels`) and its pixels are made per
batch. LoRA on the language model's linear layers only; the vision tower and its merger stay frozen. Scoring runs
every candidate with its whole history (no shared KV cache: Qwen2-VL's 3-D rotary positions depend on the images).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import io
import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch
from peft import PeftModel, get_peft_model
from transformers import (AutoConfig, AutoImageProcessor, AutoTokenizer, Qwen2VLForConditionalGeneration,
                          TrainingArguments)

from sweet.algos.critic import DONE_FILE, write_critic_config
from sweet.algos.dialogue import encode_all, fit_dialogue, turn_index, with_training_info
from sweet.algos.training import checkpoint_dir, load_base_model, local_model_path, run_training, training_kwargs
from sweet.algos.value_head import (ValueTrainer, attach_value_head, collate_trajectories, save_head_copy,
                                    span_values, value_lora_config)
from sweet.models import model_dtype, pick_device
from sweet.precision import autocast

VLM_MODEL_TYPES = ("qwen2_vl",)  # what is built and tested here (Qwen2.5-VL would need its own model class)
VISION_START, IMAGE_PAD, VISION_END = "<|vision_start|>", "<|image_pad|>", "<|vision_end|>"
# LoRA on the language model only: the vision tower (model.visual: blocks + merger) stays frozen.
LM_LINEAR = r".*language_model\..*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)"
NO_SCREENSHOT = "(the page rendered nothing)"


def check_vlm_base(base_model: str) -> None:
    """One clear error when `base_model` is not a vision-language model this critic is built for."""
    model_type = AutoConfig.from_pretrained(base_model).model_type
    if model_type not in VLM_MODEL_TYPES:
        raise ValueError(f"critic.kind='vlm' needs a Qwen2-VL base model (models.critic_base, e.g. "
                         f"Qwen/Qwen2-VL-7B-Instruct); {base_model} is a {model_type!r} model (set critic.kind=text "
                         "for a text-only critic)")


class Screens:
    """PNG screenshots -> the model's image inputs. `prepare` resizes a PNG once to the size the processor would
    give it (so the processor does not resample it again) and counts its image tokens; `pixels` makes a batch's
    pixel_values / image_grid_thw."""

    def __init__(self, processor, max_pixels: int = 0):
        self.processor = processor
        self.min_pixels, self.max_pixels = processor.size["shortest_edge"], processor.size["longest_edge"]
        if max_pixels:
            self.max_pixels = max(max_pixels, self.min_pixels)
            processor.size = {"shortest_edge": self.min_pixels, "longest_edge": self.max_pixels}
        self.patch, self.merge = processor.patch_size, processor.merge_size
        self._cache: dict[bytes, tuple[bytes, int]] = {}

    def prepare(self, png: bytes) -> tuple[bytes, int]:
        """(resized PNG, number of image tokens it takes)."""
        key = hashlib.sha256(png).digest()
        if key not in self._cache:
            if len(self._cache) >= 4096:
                self._cache.clear()  # a bound on memory: ranking sees new pages every turn
            from PIL import Image
            from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

            img = Image.open(io.BytesIO(png)).convert("RGB")
            h, w = smart_resize(img.height, img.width, self.patch * self.merge, self.min_pixels, self.max_pixels)
            buf = io.BytesIO()
            img.resize((w, h), Image.BICUBIC).save(buf, format="PNG")
            self._cache[key] = (buf.getvalue(), (h // self.patch) * (w // self.patch) // self.merge ** 2)
        return self._cache[key]

    def pixels(self, pngs: list[bytes]) -> dict:
        from PIL import Image
        images = [Image.open(io.BytesIO(p)).convert("RGB") for p in pngs]
        out = self.processor(images=images, return_tensors="pt")
        return {"pixel_values": out["pixel_values"], "image_grid_thw": out["image_grid_thw"]}


@dataclass
class VLMInputs:
    """What turns a dialogue and its screenshots into model inputs: the tokenizer and the image side."""
    tokenizer: object
    screens: Screens

    @functools.cached_property
    def image_pad_id(self) -> int:
        tid = self.tokenizer.convert_tokens_to_ids(IMAGE_PAD)
        if not isinstance(tid, int) or tid == self.tokenizer.unk_token_id:
            raise ValueError(f"the critic's tokenizer has no {IMAGE_PAD} token: not a Qwen2-VL tokenizer")
        return tid

    @property
    def pad_id(self) -> int:
        t = self.tokenizer
        return t.pad_token_id if t.pad_token_id is not None else t.eos_token_id


def _vision(screens: Screens, png: bytes | None) -> tuple[str, list[bytes]]:
    if png is None:
        return NO_SCREENSHOT, []
    resized, n = screens.prepare(png)
    return VISION_START + IMAGE_PAD * n + VISION_END, [resized]


def screened_messages(messages: list[dict], turn_images: list, info_image, use_training_info: bool,
                      screens: Screens) -> list[dict]:
    """Copy of `messages` with each assistant turn's screenshot after its text (`turn_images`: one PNG or None per
    assistant message; None = no page, nothing added) and, with `use_training_info`, the reference screenshot as c.
    Each message lists its resized images under '_images' (in order), so images follow the turns a length cut
    keeps."""
    n_turns = sum(m["role"] == "assistant" for m in messages)
    if len(turn_images) != n_turns:
        raise ValueError(f"vlm critic: {len(turn_images)} turn images for {n_turns} assistant turns")
    out, k = [], 0
    for m in messages:
        m = {"role": m["role"], "content": m["content"]}
        if m["role"] == "assistant":
            if turn_images[k] is not None:
                text, m["_images"] = _vision(screens, turn_images[k])
                m["content"] += "\n" + text
            k += 1
        out.append(m)
    if use_training_info:
        text, images = _vision(screens, info_image)
        out = with_training_info(out, text)
        out[0]["_images"] = out[0].get("_images", []) + images
    return out


def encode_screened(inputs: VLMInputs, messages: list[dict], turn_images: list, info_image, reward: float,
                    use_training_info: bool, max_length: int | None) -> dict:
    """Token ids (image pads expanded), per-token turn index (-1 outside assistant turns), resized images in the
    order of their pads, and the reward."""
    msgs = screened_messages(messages, turn_images, info_image, use_training_info, inputs.screens)
    kept, tok = fit_dialogue(inputs.tokenizer, msgs, max_length)
    if not tok["turn_spans"]:
        raise ValueError("vlm-critic trajectory has no assistant turn")
    return {"input_ids": tok["input_ids"], "turn_ids": turn_index(len(tok["input_ids"]), tok["turn_spans"]),
            "reward": float(reward), "images": [p for m in kept for p in m.get("_images", [])]}


def encode_trajectory(inputs: VLMInputs, traj: dict, cfg) -> dict:
    for key in ("messages", "reward", "turn_images") + (("info_image",) if cfg.use_training_info else ()):
        if key not in traj:
            raise KeyError(f"vlm-critic trajectory is missing {key!r} (expects messages, reward, turn_images, "
                           "info_image)")
    if not math.isfinite(float(traj["reward"])):
        raise ValueError(f"vlm-critic trajectory has a non-finite reward {traj['reward']!r}")
    return encode_screened(inputs, traj["messages"], traj["turn_images"], traj.get("info_image"), traj["reward"],
                           cfg.use_training_info, cfg.max_length)


@functools.cache
def _takes_token_types(model_class: type) -> bool:
    # Newer transformers need the token types for Qwen2-VL's 3-D positions; older ones (< 5.x) find the images alone.
    return "mm_token_type_ids" in inspect.signature(model_class.forward).parameters


def collate(rows: list[dict], inputs: VLMInputs) -> dict:
    batch = collate_trajectories(rows, inputs.pad_id)
    images = [p for r in rows for p in r["images"]]
    if images:
        batch.update(inputs.screens.pixels(images))
        if _takes_token_types(Qwen2VLForConditionalGeneration):
            batch["mm_token_type_ids"] = (batch["input_ids"] == inputs.image_pad_id).int()
    return batch


def vlm_inputs(folder: str, image_max_pixels: int = 0) -> VLMInputs:
    return VLMInputs(AutoTokenizer.from_pretrained(folder),
                     Screens(AutoImageProcessor.from_pretrained(folder), image_max_pixels))


# ------------------------------------------------------------------------------------------------ training
def train_vlm_critic(trajectories: list[dict], base_model: str, out_dir: Path, cfg, callbacks=(),
                     device: str = "auto") -> Path:
    """Stage 'train critic' for kind='vlm': LoRA on the language model + fp32 head, MSE on rewards, from
    `{"messages", "reward", "turn_images", "info_image"}` trajectories (PNG bytes or None); returns `out_dir/critic`
    (adapter with the head, value_head.pt, tokenizer, image processor, critic_config.json with kind='vlm')."""
    final = Path(out_dir) / "critic"
    if (final / DONE_FILE).exists():
        return final  # content-addressed output already complete
    if not getattr(cfg, "lora", True):
        raise ValueError("the vlm critic trains a LoRA on its language model; set critic.lora=True")
    base_model = local_model_path(base_model)
    check_vlm_base(base_model)
    inputs = vlm_inputs(base_model, cfg.image_max_pixels)
    rows = encode_all(trajectories, lambda t: encode_trajectory(inputs, t, cfg), "train_vlm_critic",
                      cfg.max_length, "trajectories")
    base = load_base_model(base_model, cfg.seed, device, Qwen2VLForConditionalGeneration)
    attach_value_head(base, bias=sum(r["reward"] for r in rows) / len(rows))
    model = get_peft_model(base, value_lora_config(cfg.lora_r, cfg.lora_alpha, LM_LINEAR))
    args = TrainingArguments(**training_kwargs(cfg, checkpoint_dir(out_dir), device))
    trainer = ValueTrainer(model=model, args=args, train_dataset=rows, callbacks=list(callbacks),
                           data_collator=lambda b: collate(b, inputs))

    def write_extra():
        save_head_copy(final)
        inputs.screens.processor.save_pretrained(final)
        write_critic_config(final, cfg, head="value", lora=True, base_model=base_model)

    return run_training(trainer, final, inputs.tokenizer, write_extra)


# ------------------------------------------------------------------------------------------------- scoring
def load_vlm_critic(critic_dir: str | Path, device: str = "auto", base_model: str | None = None):
    """(PeftModel with the trained head, VLMInputs) from a `train_vlm_critic` output."""
    device, d = pick_device(device), Path(critic_dir)
    conf = json.loads((d / DONE_FILE).read_text())
    base = Qwen2VLForConditionalGeneration.from_pretrained(base_model or conf["base_model"],
                                                           dtype=model_dtype(device))
    attach_value_head(base)  # placeholder; the adapter file holds the trained head
    model = PeftModel.from_pretrained(base, str(d)).to(device).eval()
    return model, vlm_inputs(str(d), conf.get("image_max_pixels", 0))


@torch.no_grad()
def score_candidates_vlm(model, inputs: VLMInputs, history: list[dict], candidates: list[str], *,
                         history_images: list, candidate_images: list, info_image=None,
                         use_training_info: bool = True, max_length: int | None = None,
                         batch_size: int = 4) -> list[float]:
    """V(o_t, a, c) of each candidate action a after `history` (ending with a user message), reading each action's
    screenshot (`history_images`: one per assistant turn of the history; `candidate_images`: one per candidate;
    None = no page) and, with `use_training_info`, the reference screenshot `info_image`. Higher = better."""
    if not history or history[-1]["role"] != "user":
        raise ValueError("score_candidates_vlm: history must end with a user message (the turn the candidates "
                         "answer)")
    if len(candidate_images) != len(candidates):
        raise ValueError(f"score_candidates_vlm: {len(candidate_images)} images for {len(candidates)} candidates")
    rows = [encode_screened(inputs, history + [{"role": "assistant", "content": c}], list(history_images) + [img],
                            info_image, 0.0, use_training_info, max_length)
            for c, img in zip(candidates, candidate_images)]
    device = next(model.parameters()).device
    out: list[float] = []
    for s in range(0, len(rows), batch_size):
        batch = {k: v.to(device) for k, v in collate(rows[s:s + batch_size], inputs).items()}
        turn_ids = batch.pop("turn_ids")
        last = turn_ids.max(dim=1, keepdim=True).values  # the candidate is each row's last assistant turn
        span_ids = torch.where(turn_ids == last, 0, -1)
        batch.pop("reward")
        with autocast(device):
            values, _ = span_values(model, batch.pop("input_ids"), batch.pop("attention_mask"), span_ids, 1, **batch)
        out += values[:, 0].float().tolist()
    return out
