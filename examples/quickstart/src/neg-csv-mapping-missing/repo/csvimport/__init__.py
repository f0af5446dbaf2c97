"""csvimport: import contacts from CRM CSV exports."""

from csvimport.reader import ImportRowError, read_contacts
from csvimport.schema import DEFAULT_MAPPING, REQUIRED_FIELDS

__all__ = ["DEFAULT_MAPPING", "REQUIRED_FIELDS", "ImportRowError", "read_contacts"]
