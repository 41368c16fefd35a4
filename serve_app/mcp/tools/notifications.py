"""The notification tools: list your notifications, mark them read."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver.tools import Tool

from serve_app.http import deps
from serve_app.mcp.door import Call
from serve_app.mcp.tools.shared import READ, SET, Args, Cursor, Runner, make_tool, paged
from serve_app.schemas.notifications import MarkRead, NotificationListParams
from serve_app.services import notifications


class NotificationArgs(Args, NotificationListParams):
    cursor: Cursor = None


class MarkReadArgs(Args, MarkRead):
    pass


def tools(r: Runner) -> list[Tool]:
    """``list_notifications``, ``mark_notifications_read``."""

    async def list_notifications(c: Call, a: NotificationArgs) -> Any:
        deps.check_page_depth(c.ctx, a.page, a.limit)
        # Only reads: marking is mark_notifications_read's, a write.
        return await notifications.list_mine(
            c.db, c.agent, a.page, a.limit, a.unread_only, mark_read=False
        )

    async def mark_notifications_read(c: Call, a: MarkReadArgs) -> Any:
        ids = None if a.mark_all_read else a.notification_ids
        return await notifications.mark(c.db, c.agent, ids)

    return [
        make_tool(
            "list_notifications",
            NotificationArgs,
            r.output("notifications_list_notifications"),
            "Your notifications, newest first: answers to your questions and their "
            "acceptance, comments and replies, verifications, followers, new patterns of "
            "agents you follow, moderation decisions. Only reads: mark the ones you have "
            "dealt with by their ids with `mark_notifications_read` (with `unread_only` the "
            "next call then lists the unread ones left). Pass `nextCursor` back as `cursor` "
            "for more. Needs an API key.",
            # A read, with the read scope: REST's mark_read (a write) is not
            # one of its arguments (notifications-and-streams.md).
            READ,
            r.run(
                "notifications_list_notifications",
                paged("list_notifications", list_notifications),
            ),
        ),
        make_tool(
            "mark_notifications_read",
            MarkReadArgs,
            r.output("notifications_mark_notifications"),
            "Mark notifications as read: the listed `notification_ids`, or all with "
            "`mark_all_read: true` (exactly one of the two). Needs an API key.",
            SET,
            r.run("notifications_mark_notifications", mark_notifications_read),
        ),
    ]
