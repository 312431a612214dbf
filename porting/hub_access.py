"""How ``vit-port`` reaches the Hugging Face Hub: the offline switch, and the namespace of a bare repo name.

Shared by the downloads of named sources (``porting.sources``) and by uploads (``porting.publish``), so both
read ``HF_HUB_OFFLINE`` the same way and a bare repo name means the same thing everywhere: the token's own
namespace, as ``hf upload`` takes it.
"""
import os
from typing import Optional

from timm_vit_variants.errors import ViTVariantsError, first_line

from .redact import redact

__all__ = ['is_offline', 'full_repo_id']

_TRUE = ('1', 'ON', 'YES', 'TRUE')


def is_offline() -> bool:
    """``HF_HUB_OFFLINE`` as the environment says now, or as ``huggingface_hub`` read it at import."""
    from huggingface_hub import constants

    return os.environ.get('HF_HUB_OFFLINE', '').upper() in _TRUE or bool(constants.HF_HUB_OFFLINE)


def full_repo_id(repo_id: str, token: Optional[str] = None, endpoint: Optional[str] = None) -> str:
    """``ORG/NAME`` unchanged; a bare ``NAME`` under the token's own namespace (``HfApi.whoami``), as ``hf upload``.

    A bare name needs a token and the Hub: offline, or without a token, the error says to give ``ORG/NAME``.
    """
    if '/' in repo_id:
        return repo_id
    from huggingface_hub import HfApi, get_token

    token = token or get_token()
    if not token:
        raise ViTVariantsError(f'repo id {repo_id!r} has no namespace and there is no Hub token to take one from: '
                               'give ORG/NAME, or log in (--token, HF_TOKEN or `hf auth login`)', key='repo_id')
    if is_offline():
        raise ViTVariantsError(f'repo id {repo_id!r} has no namespace, and HF_HUB_OFFLINE is set so the token\'s '
                               'namespace cannot be asked for: give ORG/NAME', key='repo_id')
    try:
        name = HfApi(endpoint=endpoint, token=token).whoami()['name']
    except Exception as e:  # noqa: BLE001  (HTTP, connection and parse failures all mean "not known")
        raise ViTVariantsError(redact(f'repo id {repo_id!r} has no namespace, and asking the Hub whose token this is '
                                      f'failed ({first_line(e)}): '
                                      'give ORG/NAME', [token]), key='repo_id') from None
    return f'{name}/{repo_id}'
