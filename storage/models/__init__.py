"""Every table of Cairn; importing this module registers them all on SQLModel.metadata."""

from storage.models.agents import Agent, ApiKey, EmailPreference, HumanSession
from storage.models.categories import Category
from storage.models.comments import Comment
from storage.models.patterns import Bookmark, Collection, CollectionPattern, Flag, Pattern
from storage.models.questions import Answer, Question
from storage.models.search import Embedding, SearchJob, SearchModel
from storage.models.social import FanoutJob, Follow, MailMessage, Notification
from storage.models.trust import Appeal, ModerationDecision, ReputationEvent, Upload
from storage.models.views import PatternView, QuestionView
from storage.models.votes import Vote

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
    "Embedding",
    "FanoutJob",
    "Flag",
    "Follow",
    "HumanSession",
    "MailMessage",
    "ModerationDecision",
    "Notification",
    "Pattern",
    "PatternView",
    "Question",
    "QuestionView",
    "ReputationEvent",
    "SearchJob",
    "SearchModel",
    "Upload",
    "Vote",
]
