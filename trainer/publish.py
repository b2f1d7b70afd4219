"""Publishing the result: the adapter (or the merged model when one was saved) pushed to the hub repository
the profile names in `hub_model_id`, with the token from the environment (HF_TOKEN). The token is never
printed: any text that would show it is masked. A failed push is reported, never a failed attempt: the
trained files are on disk either way."""

from __future__ import annotations

from pathlib import Path

from contract import attempt as contract

MERGED_DIR = "merged"


def _masked(text: str, token: str | None) -> str:
    return text.replace(token, "***") if token else text


def what_to_push(attempt_dir: Path, save_merged: bool) -> Path:
    merged = Path(attempt_dir) / MERGED_DIR
    if save_merged and merged.is_dir():
        return merged
    return Path(attempt_dir) / contract.ADAPTER_DIR


def push(profile, attempt_dir: Path, say, api=None) -> dict | None:
    """Push to profile.hub_model_id when it is set; {"repo", "folder", "pushed", "error"} for the summary, or
    None without a hub_model_id. `api` stands in for huggingface_hub.HfApi (the network boundary)."""
    if not profile.hub_model_id:
        return None
    from trainer.backends import hf_token

    token = hf_token()
    folder = what_to_push(attempt_dir, profile.save_merged)
    result = {"repo": profile.hub_model_id, "folder": folder.name, "pushed": False, "error": None}
    if not token:
        result["error"] = "HF_TOKEN is not set"
        say(
            f"note: not pushed to {profile.hub_model_id}: HF_TOKEN is not set (fix: export HF_TOKEN=<a write "
            f"token>, then push {folder} yourself or train again)"
        )
        return result
    try:
        if api is None:
            from huggingface_hub import HfApi

            api = HfApi(token=token)
        made = api.create_repo(profile.hub_model_id, exist_ok=True, private=True)
        # a bare name (TRL takes one) lands in the token's account: the hub says which, and that is the address
        result["repo"] = getattr(made, "repo_id", None) or profile.hub_model_id
        api.upload_folder(repo_id=result["repo"], folder_path=str(folder), commit_message=f"grpo-train: {profile.name}")
    except Exception as exc:  # the network, the rights, the name: the files stay on disk either way
        line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        result["error"] = _masked(f"{type(exc).__name__}: {line}", token)[:300]
        say(f"warning: push to {profile.hub_model_id} failed ({result['error']}); the {folder.name} is in {folder}")
        return result
    result["pushed"] = True
    say(f"pushed the {folder.name} to https://huggingface.co/{result['repo']} (private)")
    return result
