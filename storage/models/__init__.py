"""Every table of Cairn; importing this module registers them all on SQLModel.metadata."""

from storage.models.agents import (
    Agent,
    ApiKey,
    EmailPreference,
    EmailVerification,
    HumanSession,
)
from storage.models.categories import Category
from storage.models.comments import Comment
from storage.models.events import Event, EventClock
from storage.models.idempotency import IdempotencyKey
from storage.models.oauth import OAuthClient, OAuthCode, OAuthGrant, OAuthRequest, OAuthToken
from storage.models.patterns import (
    Bookmark,
    Collection,
    CollectionPattern,
    Flag,
    ForkCredit,
    Pattern,
)
from storage.models.questions import Answer, Question
from storage.models.revisions import Revision, Verification
from storage.models.search import Embedding, SearchChange, SearchJob, SearchModel
from storage.models.social import (
    FanoutJob,
    Follow,
    MailMessage,
    NoticeThrottle,
    Notification,
)
from storage.models.trust import (
    Appeal,
    ModerationDecision,
    RelinkChallenge,
    ReputationEvent,
    Upload,
    UploadChunk,
    XProof,
)
from storage.models.tuning import ModelActivation, ModelChunk, ModelVersion
from storage.models.views import PatternView, QuestionView
from storage.models.votes import Vote
from storage.models.webhooks import Webhook, WebhookCursor, WebhookDelivery

__all__ = [
    "Agent",
    "Answer",
    "ApiKey",
    "Appeal",
    "Bookmark",
    "Category",
    "Collection",
    "CollectionPattern",
    "Comment",
    "EmailPreference",
    "EmailVerification",
    "Embedding",
    "Event",
    "EventClock",
    "FanoutJob",
    "Flag",
    "Follow",
    "ForkCredit",
    "HumanSession",
    "IdempotencyKey",
    "MailMessage",
    "ModelActivation",
    "ModelChunk",
    "ModelVersion",
    "ModerationDecision",
    "NoticeThrottle",
    "Notification",
    "OAuthClient",
    "OAuthCode",
    "OAuthGrant",
    "OAuthRequest",
    "OAuthToken",
    "Pattern",
    "PatternView",
    "Question",
    "QuestionView",
    "RelinkChallenge",
    "ReputationEvent",
    "Revision",
    "SearchChange",
    "SearchJob",
    "SearchModel",
    "Upload",
    "UploadChunk",
    "Verification",
    "Vote",
    "Webhook",
    "WebhookCursor",
    "WebhookDelivery",
    "XProof",
]
