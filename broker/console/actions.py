"""The console's one state-changing action: abort a transaction, confirmed on its own
page, then a POST with the CSRF token (broker/console/auth.py).

- A transaction the coordinator holds open (Ongoing) is aborted by the coordinator, as
  its timeout would abort it: the producer is fenced (epoch bump) and ABORT markers go
  to every partition of the transaction, so it stays atomic. Allowed to a principal
  with WRITE on the transactional id: the right to InitProducerId it, which fences and
  aborts the same way.
- A hanging transaction (open in a partition, not part of any coordinator
  transaction) gets an ABORT marker in that partition through the path WriteTxnMarkers
  takes (KIP-664's Admin.abortTransaction, ``txbroker transactions abort``). Allowed
  with ALTER or CLUSTER_ACTION on the cluster, as WriteTxnMarkers is.

A refusal answers with Kafka's error name; every attempt is logged at INFO with who.
"""

from __future__ import annotations

import logging

from aiohttp import web
from txbroker.coordinator.transaction.markers import write_markers
from txbroker.protocol.acls import CLUSTER_NAME, AclOperation, ResourceType
from txbroker.protocol.errors import ErrorCode

from .auth import who
from .hanging import open_transactions
from .html import AUTH, BROKER, SECURITY_HEADERS, Raw, esc, layout, link, seg, url
from .topics import partition_href

log = logging.getLogger("txbroker.console")


def _authorized(request: web.Request, op: AclOperation, rtype: ResourceType,
                name: str) -> bool:
    broker = request.app[BROKER]
    if broker.authorizer is None:
        return True
    return broker.authorizer.authorize(request.app[AUTH].principal,
                                       request.remote or "", op, rtype, name)


def _form(request: web.Request, action: str, fields: dict[str, object], question: str,
          back: str) -> Raw:
    auth = request.app[AUTH]
    hidden = "".join(f'<input type="hidden" name="{esc(k)}" value="{esc(v)}">'
                     for k, v in {**fields, "csrf": auth.csrf_token()}.items())
    return Raw(f'<form method="post" action="{esc(action)}" class="confirm">{hidden}'
               f"<p>{esc(question)}</p>"
               f'<button type="submit" class="danger" id="confirm-abort">Abort</button> '
               f"{link(back, 'cancel')}</form>")


def _refused(request: web.Request, why: str, error: ErrorCode | None,
             status: int) -> web.Response:
    name = error.name.upper() if error is not None else ""
    text = f"{name}: {why}" if name else why
    return layout(request, "Refused", f'<p class="error" id="error">{esc(text)}</p>',
                  status=status)


async def _checked_post(request: web.Request):
    """(broker, auth, form, who) of a POST that passed the CSRF and token checks; else
    the refusal is raised."""
    auth = request.app[AUTH]
    form = await request.post()
    why = auth.check_post(request, form)
    if why is not None:
        log.info("console: refused %s %s from %s: %s", request.method, request.path,
                 request.remote, why)
        response = _refused(request, why, None, 403)
        raise web.HTTPForbidden(text=response.text, content_type="text/html",
                                headers=SECURITY_HEADERS)
    return request.app[BROKER], auth, form, who(request, auth)


async def confirm_abort(request: web.Request) -> web.Response:
    broker = request.app[BROKER]
    auth = request.app[AUTH]
    tid = request.match_info["tid"]
    d = broker.transactions.describe(tid)
    if not auth.can_act:
        return _refused(request, auth.why_read_only(), None, 403)
    if d.error:
        return _refused(request, f"transactional id {tid!r}", ErrorCode(d.error), 404)
    parts = ", ".join(f"{t}-{p}" for t, ps in d.topics.items() for p in ps)
    question = (f"Abort the {d.state} transaction of {tid!r} (producer {d.producer_id}, "
                f"epoch {d.producer_epoch}) in {parts or 'no partition yet'}? The producer "
                f"is fenced: its next request fails with PRODUCER_FENCED or "
                f"INVALID_PRODUCER_EPOCH.")
    back = f"/console/transactions/{seg(tid)}"
    return layout(request, "Abort transaction", str(_form(
        request, f"/console/transactions/{seg(tid)}/abort",
        {"producer_id": d.producer_id, "producer_epoch": d.producer_epoch}, question, back)))


async def abort(request: web.Request) -> web.Response:
    broker, auth, form, actor = await _checked_post(request)
    tid = request.match_info["tid"]
    if not _authorized(request, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, tid):
        log.info("console: %s may not abort the transaction of %r "
                 "(TRANSACTIONAL_ID_AUTHORIZATION_FAILED)", actor, tid)
        return _refused(request, f"{auth.principal} has no WRITE on transactional id {tid!r}",
                        ErrorCode.transactional_id_authorization_failed, 403)
    d = broker.transactions.describe(tid)
    if d.error:
        return _refused(request, f"transactional id {tid!r}", ErrorCode(d.error), 404)
    # The form names the producer it was shown: a newer transaction is not aborted blind.
    if (str(d.producer_id), str(d.producer_epoch)) != (form.get("producer_id"),
                                                       form.get("producer_epoch")) \
            or d.state != "Ongoing":
        log.info("console: %s asked to abort the transaction of %r, which is now %s "
                 "(producer %d epoch %d): nothing done", actor, tid, d.state, d.producer_id,
                 d.producer_epoch)
        return _refused(request, f"the transaction of {tid!r} is now {d.state} (producer "
                        f"{d.producer_id}, epoch {d.producer_epoch})",
                        ErrorCode.invalid_txn_state, 409)
    done = broker.transactions.abort_now(tid)
    log.info("console: %s aborted the transaction of %r (producer %d epoch %d, %s): %s",
             actor, tid, d.producer_id, d.producer_epoch,
             ", ".join(f"{t}-{p}" for t, ps in d.topics.items() for p in ps) or "no partitions",
             "fenced, markers follow" if done else "nothing to abort")
    flash = (f"Aborting the transaction of {tid}: producer fenced, ABORT markers being "
             f"written." if done else f"The transaction of {tid} was not ongoing any more.")
    raise web.HTTPSeeOther(url("/console/transactions", state="all", flash=flash))


def _find_hanging(request: web.Request, params) -> tuple:
    broker = request.app[BROKER]
    topic = str(params.get("topic", ""))
    try:
        partition, pid = int(params.get("partition", "")), int(params.get("producer_id", ""))
    except ValueError:
        raise web.HTTPBadRequest(text="partition and producer_id must be numbers\n") from None
    plog = broker.logs.get_log(topic, partition)
    if plog is None:
        return topic, partition, pid, None
    match = [o for o in open_transactions(broker, [plog]) if o.producer_id == pid]
    return topic, partition, pid, match[0] if match else None


async def confirm_abort_hanging(request: web.Request) -> web.Response:
    auth = request.app[AUTH]
    if not auth.can_act:
        return _refused(request, auth.why_read_only(), None, 403)
    topic, partition, pid, found = _find_hanging(request, request.query)
    if found is None:
        return _refused(request, f"no open transaction of producer {pid} in "
                        f"{topic}-{partition}", ErrorCode.invalid_txn_state, 404)
    note = "" if found.hanging else (" It is NOT hanging: its coordinator counts this "
                                     "partition, or it was written to recently.")
    question = (f"Write an ABORT marker for producer {pid} (epoch {found.producer_epoch}) "
                f"in {topic}-{partition}, ending its transaction there, which started at "
                f"offset {found.first_offset}?{note}")
    body = _form(request, "/console/hanging/abort",
                 {"topic": topic, "partition": partition, "producer_id": pid,
                  "producer_epoch": found.producer_epoch,
                  "coordinator_epoch": found.coordinator_epoch},
                 question, partition_href(topic, partition))
    return layout(request, "Abort a hanging transaction", str(body))


async def abort_hanging(request: web.Request) -> web.Response:
    broker, auth, form, actor = await _checked_post(request)
    topic, partition, pid, found = _find_hanging(request, form)
    if not (_authorized(request, AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME)
            or _authorized(request, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER,
                           CLUSTER_NAME)):
        log.info("console: %s may not write an ABORT marker in %s-%d "
                 "(CLUSTER_AUTHORIZATION_FAILED)", actor, topic, partition)
        return _refused(request, f"{auth.principal} has neither ALTER nor CLUSTER_ACTION on "
                        "the cluster", ErrorCode.cluster_authorization_failed, 403)
    if found is None:
        return _refused(request, f"no open transaction of producer {pid} in "
                        f"{topic}-{partition}", ErrorCode.invalid_txn_state, 404)
    if found.counted:
        # As `txbroker transactions abort` without --force: the coordinator writes this
        # marker itself, and one written by hand would break the transaction's atomicity.
        return _refused(request, f"{topic}-{partition} is part of the transaction of "
                        f"{found.transactional_id!r} at its coordinator: abort that "
                        "transaction instead", ErrorCode.invalid_txn_state, 409)
    epoch = int(form.get("producer_epoch", found.producer_epoch))
    results = await write_markers(broker.logs, broker.groups, pid, epoch, False,
                                  [(topic, partition)], max(found.coordinator_epoch, 0))
    error = results[(topic, partition)]
    log.info("console: %s wrote an ABORT marker for producer %d epoch %d in %s-%d "
             "(KIP-664): %s", actor, pid, epoch, topic, partition, error.name.upper())
    if error != ErrorCode.none:
        return _refused(request, f"the ABORT marker in {topic}-{partition}", error, 409)
    raise web.HTTPSeeOther(url(partition_href(topic, partition),
                               flash=f"Aborted producer {pid}'s transaction in "
                                     f"{topic}-{partition}."))


