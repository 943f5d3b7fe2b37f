"""An auth manager that grants read access to assets one by one, for tests of what each user may see.

Airflow 3.3's ``SimpleAuthManager`` decides by role only (a viewer reads every asset), and the FAB auth manager is
not installed here, so no installed auth manager can say "alice may read these assets and not those". This one is
``SimpleAuthManager`` (its users, roles, passwords and login form) with ``is_authorized_asset`` answered per asset
for the users named in the config; an auth manager is Airflow's own extension point for that decision
(``[core] auth_manager``), so the code under test asks it exactly as it asks any other::

    [core]
    auth_manager = testbed.asset_auth_manager.PerAssetAuthManager

    [testbed_auth]
    asset_grants = {"alice": ["tiering/sales/"], "bob": ["tiering/hr/"]}

``asset_grants`` maps a user to prefixes of the names of the assets they may read; such a user may do nothing
else to assets (no edit), and may "read assets" in general (the check without an asset id) when granted any.
Users not named keep ``SimpleAuthManager``'s role rules.
"""

from __future__ import annotations

import functools
import json

from airflow.api_fastapi.auth.managers.models.resource_details import AssetDetails
from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager
from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
from airflow.configuration import conf

SECTION = "testbed_auth"


def asset_grants() -> dict[str, list[str]]:
    """``{user: [asset name prefix, ...]}`` from ``[testbed_auth] asset_grants``."""
    return dict(json.loads(conf.get(SECTION, "asset_grants", fallback="{}")))


@functools.lru_cache(maxsize=4096)
def _asset_name(asset_id: int) -> str | None:
    # Asset ids are never reused, so a name once read stays right.
    from airflow.models.asset import AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        return session.scalar(select(AssetModel.name).where(AssetModel.id == asset_id))


class PerAssetAuthManager(SimpleAuthManager):
    """``SimpleAuthManager`` with per-user, per-asset read grants (``[testbed_auth] asset_grants``)."""

    def is_authorized_asset(
        self,
        *,
        method: str,
        user: SimpleAuthManagerUser,
        details: AssetDetails | None = None,
    ) -> bool:
        prefixes = asset_grants().get(user.get_name())
        if prefixes is None:
            return super().is_authorized_asset(method=method, user=user, details=details)  # type: ignore[arg-type]
        if method != "GET":
            return False
        if details is None or details.id is None:
            return bool(prefixes)
        name = _asset_name(int(details.id))
        return name is not None and any(name.startswith(prefix) for prefix in prefixes)
