"""How CRM export columns map to contact fields.

Keys are the column headers exactly as they appear in the export; values
are the field names used by the rest of the application.
"""

from __future__ import annotations

from typing import Dict, Tuple

DEFAULT_MAPPING: Dict[str, str] = {
    "Name": "name",
    "E-mail": "email",
    "Phone": "phone",
    "Company": "company",
    "Signup Date": "signed_up",
}

REQUIRED_FIELDS: Tuple[str, ...] = ("name", "email")
