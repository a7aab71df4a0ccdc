"""Best-of-N at test time (the paper's scaling figure): per turn, the initial policy samples N actions and the
critic keeps the one it scores highest. The critic reads the task's hidden reference c, as in training, so this
measures how well the critic ranks actions, not a deployable agent."""

from __future__ import annotations

from pathlib import Path

from sweet.colbench.backend import task_message


class BestOfN:
    """A policy backend (same `generate` as ChatLM) that returns, per conversation, the critic's best of N samples."""

    def __init__(self, policy, critic, info_by_problem: dict[str, str], n: int, temperature: float, flags: dict):
        self.policy, self.critic, self.info = policy, critic, info_by_problem
        self.n, self.temperature, self.flags = n, temperature, flags
        self.name, self.batch_size = f"best_of_{n}({policy.name})", policy.batch_size

    def close(self) -> None:
        """Release the policy (a llama-server, a vLLM engine) and a critic that holds one; safe to call twice."""
        from sweet.stages.collect import close_models

        close_models(self.policy, getattr(self.critic, "model", None), getattr(self.critic, "screenshots", None))

    def generate(self, conversations, max_new_tokens, temperature=0.0, seed=None, num_return_sequences=1):
        from sweet.algos.scoring import score_any

        samples = self.policy.generate(conversations, max_new_tokens, self.temperature, seed=seed,
                                       num_return_sequences=self.n)
        out = []
        for i, conv in enumerate(conversations):
            cands = samples[i * self.n:(i + 1) * self.n]
            if conv[-1]["role"] == "assistant":  # a begun answer (answer_prefill): each candidate holds it whole
                conv = conv[:-1]
            scores = score_any(self.critic, conv, cands, self.info[task_message(conv)], **self.flags)
            out.append(cands[max(range(len(cands)), key=lambda j: scores[j])])
        return out


def load_best_of_n(cfg, critic_dir: Path, tasks: list):
    """(BestOfN policy, simulator) for the evaluate stage."""
    from sweet.algos.scoring import load_any_critic
    from sweet.colbench.registry import family
    from sweet.stages.candidates import critic_flags, critic_screens
    from sweet.stages.collect import load_chat_models

    e = cfg.evaluate
    policy, simulator = load_chat_models(cfg, cfg.models.policy, batch=e.batch_episodes)
    # Conversations are matched to their task by the message that states it (`backend.task_message`).
    info = {task_message(family(cfg).episode(t, 0, e.max_turns, mode=mode, agent_view=cfg.agent_view).messages):
            t.ground_truth for t in tasks for mode in e.modes}
    critic = load_any_critic(critic_dir, policy.device, cfg, critic_screens(cfg))  # on vLLM when engine.backend=vllm
    return BestOfN(policy, critic, info, e.best_of_n, e.best_of_n_temperature, critic_flags(cfg)), simulator
