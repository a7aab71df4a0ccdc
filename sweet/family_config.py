"""The task-family sections of the config (`backend.*`, `frontend.*`): how each ColBench family shows the dialogue
to its simulator, renders and compares pages. Kept apart from `sweet.config`, which re-exports them, so each stays a
readable size."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Cfg(BaseModel):  # as sweet.config's sections
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class BackendConfig(_Cfg):
    """task_family=backend: how the human simulator is shown the dialogue."""
    simulator_view: Literal["chat", "transcript"] = Field(
        "chat", description="'chat' (CPU default): the dialogue as chat turns, roles swapped. 'transcript' (paper "
        "profiles): one user message holding the whole dialogue, as the released environment shows it. The system "
        "message holds the instructions and the hidden code either way (README, Fidelity).")
    answer_prefill: bool = Field(
        False, description="Begin the agent's last-turn reply with 'I WANT TO ANSWER:' and a ```python fence, and let "
        "the model continue it (every engine continues a final assistant message), so a dialogue that asked still "
        "ends with code. Applies to collection, candidates and evaluation alike (zero-shot included); off in the "
        "paper profiles, whose protocol has no such help.")


class FrontendConfig(_Cfg):
    """task_family=frontend: how pages are rendered and compared, and who plays the user."""
    simulator: str = Field("dom-diff", description="'dom-diff' (offline default: compares the two rendered DOMs and "
                           "describes the largest differences; not a vision model) or 'api:<vision model>[@url]' "
                           "(the paper's: Qwen2-VL-72B-Instruct behind an OpenAI-compatible server).")
    similarity: str = Field("pixel", description="Reward metric: 'pixel' (named fallback 'pixel-ssim+edges+colour-256', "
                            "not CLIP), 'clip:openai' (CLIP ViT-B/32 OpenAI weights, needs the hub) or "
                            "'clip:<local weights file>'. Every score is stored with its metric's name.")
    pool_size: int = Field(2, ge=1, description="Browser pages rendering at once (one Chromium per stage).")
    viewport_width: int = Field(1280, ge=320)
    viewport_height: int = Field(720, ge=240)
    timeout_s: float = Field(10.0, gt=0, description="Seconds a page gets to load; a page that never loads gives "
                             "a defined (blank or partial) screenshot and an error, never a hung stage.")
    javascript: bool = Field(False, description="Run the pages' scripts (still offline). WebSight pages are static.")
    chromium: str = Field("", description="Chromium executable; empty = Playwright's own browser, else the system one.")
    screenshot_max_height: int = Field(2880, ge=240, description="Full-page screenshots are clipped at this height "
                                       "(px; 4x the default viewport height), at least viewport_height.")
    sim_reply_chars: int = Field(1000, ge=50, description="Simulator replies are cut here (paper: 1,000 characters).")
    win_rate_baseline: str = Field("zero_shot", description="The system (table row) other systems' win rates are "
                                   "measured against; the paper uses GPT-4o's pages (add 'api:gpt-4o' to "
                                   "evaluate.agents and set this to 'gpt-4o').")


    @model_validator(mode="after")
    def _clip_below_viewport(self):
        if self.screenshot_max_height < self.viewport_height:
            raise ValueError(f"frontend.screenshot_max_height must be at least viewport_height ({self.viewport_height})")
        return self
