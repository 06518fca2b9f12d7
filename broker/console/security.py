"""ACLs and SCRAM users, read-only (names and iteration counts, never credentials)."""

from __future__ import annotations

from aiohttp import web

from .html import BROKER, Raw, esc, layout, page_params, pager, table


async def security(request: web.Request) -> web.Response:
    broker = request.app[BROKER]
    start, limit = page_params(request)
    authorizer = broker.authorizer
    if authorizer is None:
        acl_part = Raw("<p>No authorizer (authorizer.class.name is not set): every "
                       "principal may do everything.</p>")
    else:
        acls = sorted(authorizer.acls, key=lambda a: (a.resource_type.name, a.resource_name,
                                                      a.principal, a.operation.name))
        supers = ", ".join(sorted(authorizer.super_users)) or "none"
        acl_part = Raw(
            f"<p>Super users: {esc(supers)}</p>"
            + table(["Resource type", "Name", "Pattern", "Principal", "Host", "Operation",
                     "Permission"],
                    [[a.resource_type.name, a.resource_name, a.pattern_type.name, a.principal,
                      a.host, a.operation.name, a.permission_type.name]
                     for a in acls[start:start + limit]], id="acls")
            + pager(request, start, limit, len(acls)))
    store = broker.scram_credentials
    users = sorted(store.users().items()) if store is not None else []
    user_rows = [[user, ", ".join(f"{m} ({n} iterations)" for m, n in sorted(mechs.items()))]
                 for user, mechs in users[:limit]]
    body = (f"<h2>ACLs</h2>{acl_part}<h2>SCRAM users</h2>"
            + table(["User", "Mechanisms"], user_rows, id="users")
            + (f"<p>{len(users) - limit} more not shown.</p>" if len(users) > limit else ""))
    return layout(request, "ACLs & users", body)
