"""Which words label a field: its own name, title and description, plus the
usual synonyms of common document fields in the common European languages.

A field is matched to *concepts* (invoice number, document date, total…) by
the words of its name, title and description; a concept brings labels (with a
weight: how surely the label announces this field), qualifier words that
disqualify a label ("Sub total", "Total HT", "Due date" are not the total or
the invoice date), the kind of value it expects and which occurrence wins
when several labels tie (the last total of a receipt, the first date).

All matching is on `fold`-ed text (lower case, no accents). Pure data and
pure functions; compiled patterns are cached per field.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any

from daemon.extraction.providers.rules.values import fold


@dataclass(frozen=True)
class Concept:
    name: str
    # Phrases in a field's name/title/description that mean this concept.
    triggers: tuple[str, ...]
    # label -> weight; the strongest labels first.
    labels: dict[str, float]
    # A label is refused when its cell also holds one of these words.
    negatives: frozenset[str] = frozenset()
    # Words that cancel the negatives ("Total incl. VAT" is a total).
    positives: frozenset[str] = frozenset()
    kind: str = "text"  # id, date, amount, currency, party, address, text, email, phone
    last: bool = False  # among equal candidates, the last in the document wins
    # Phrases in a trigger-matching field that rule this concept out ("due date" is not "date").
    excluded_by: tuple[str, ...] = ()


def _labels(strong: str, medium: str = "", weak: str = "") -> dict[str, float]:
    out: dict[str, float] = {}
    for text, weight in ((strong, 1.0), (medium, 0.85), (weak, 0.6)):
        for label in text.split("|"):
            label = label.strip()
            if label and label not in out:
                out[label] = weight
    return out


_TAX_WORDS = frozenset(
    "tax taxes vat tva btw mwst ust iva gst sst hst pst igst cgst sgst tps tvq moms alv dph ppn".split()
)
_EXCLUSIVE = frozenset(
    "ht sub subtotal excl excl. exclusive excluding exclusief exkl exkl. zonder ohne hors netto nett0 "
    "before untaxed pre-tax pretax netto-betrag".split()
)

CONCEPTS: tuple[Concept, ...] = (
    Concept(
        "invoice_number",
        triggers=("invoice number", "invoice no", "invoice id", "invoice #", "invoice_number", "invoice num",
                  "receipt number", "receipt no", "bill number", "bill no", "document number", "reference",
                  "invoice ref", "factuurnummer", "rechnungsnummer", "numero de facture", "numer faktury"),
        labels=_labels(
            "invoice number|invoice no|invoice nr|invoice num|invoice #|invoice id|invoice ref|inv no|inv #|"
            "tax invoice no|tax invoice number|bill no|bill number|receipt no|receipt number|receipt #|"
            "facture n°|facture no|facture n|facture numero|n° de facture|no de facture|numero de facture|"
            "n° facture|rechnungsnr|rechnungsnummer|rechnung nr|rechnungs-nr|factuurnummer|factuurnr|"
            "factuur nr|faktura nr|faktura vat nr|numer faktury|nr faktury|numero de factura|factura n°|"
            "factura no|n° factura|fattura n|numero fattura|nota fiscal|documento n°",
            "invoice|factuur|facture|rechnung|faktura|factura|fattura|document no|document number|doc no|document #|bill #|cash bill no|receipt|reference no|"
            "reference number|ref no|belegnummer|beleg nr|numero|nummer|#",
            "reference|ref|booking id|booking no|booking reference|order id|order no|order number|"
            "transaction id|trans no|ticket no|no",
        ),
        negatives=_TAX_WORDS | frozenset(
            "date datum data fecha date: due account customer client kunden klant id-nr ust-id phone tel "
            "fax order po purchase iban swift bic page seite pagina total amount montant bedrag betrag kvk "
            "siret siren contract period to from address".split()
        ),
        kind="id",
    ),
    Concept(
        "due_date",
        triggers=("due date", "payment due", "due by", "pay by", "vervaldatum", "fälligkeit", "date limite",
                  "echeance", "expiry", "deadline"),
        labels=_labels(
            "due date|payment due|date due|due by|pay by|payment date|vervaldatum|vervaldag|falligkeitsdatum|"
            "fallig am|zahlbar bis|zahlungsziel|date limite de paiement|date d'echeance|echeance|"
            "fecha de vencimiento|vencimiento|termin platnosci|scadenza",
            "due",
        ),
        kind="date",
    ),
    Concept(
        "date",
        triggers=("invoice date", "date", "issued", "issue date", "purchase date", "document date", "datum",
                  "receipt date", "billing date", "transaction date"),
        excluded_by=("due", "delivery", "order date", "ship", "birth", "expir", "start", "end date",
                     "payment date", "period"),
        labels=_labels(
            "invoice date|date of invoice|date of issue|issue date|issued on|date issued|bill date|billing date|"
            "receipt date|document date|tax invoice date|invoice dt|rechnungsdatum|factuurdatum|factuur datum|"
            "date de facture|date facture|date de facturation|date d'emission|data wystawienia|"
            "data faktury|fecha de factura|fecha de emision|data fattura|data emissione|belegdatum|"
            "date",
            "datum|dated|data|fecha|tarikh|issued|trans date|transaction date|sale date|purchase date|"
            "date/time|date & time|date time",
            "du|le|on",
        ),
        negatives=frozenset(
            "due limite echeance vervaldatum vervaldag fallig falligkeit zahlungsziel delivery livraison "
            "lieferdatum leverdatum ship shipping order orderdatum bestelldatum commande check-in check-out "
            "check in out arrival departure expiry expiration valid birth start end from to period "
            "payment paiement betaling prelevement reglement print printed sepa mandate".split()
        ),
        kind="date",
    ),
    Concept(
        "subtotal",
        triggers=("subtotal", "sub total", "net amount", "amount before tax", "untaxed", "excluding tax",
                  "excl", "net total", "total ht", "netto"),
        labels=_labels(
            "subtotal|sub total|sub-total|total excl vat|total excl. vat|total excluding tax|net amount|"
            "total ht|montant ht|total hors taxes|nettobetrag|netto|summe netto|subtotaal|totaal excl btw|"
            "exclusief btw|razem netto|wartosc netto|base imponible|imponibile",
            "net|untaxed amount|amount before tax",
        ),
        kind="amount",
        last=True,
    ),
    Concept(
        "tax",
        triggers=("tax", "vat", "gst", "tva", "btw", "mwst", "sales tax", "tax amount", "iva"),
        excluded_by=("tax included", "incl", "rate", "id", "number", "percent", "%"),
        labels=_labels(
            "tax|vat|tva|btw|mwst|ust|gst|sst|sales tax|tax amount|vat amount|total tax|total vat|"
            "montant tva|btw bedrag|umsatzsteuer|mehrwertsteuer|kwota vat|iva",
        ),
        negatives=frozenset("id no number nr reg registration rate % incl excl base tin".split()),
        kind="amount",
        last=True,
    ),
    Concept(
        "total",
        triggers=("total", "amount due", "grand total", "balance due", "amount paid", "total amount",
                  "amount payable", "sum", "montant", "betrag", "bedrag", "amount"),
        excluded_by=("subtotal", "sub total", "tax amount", "vat amount", "before tax", "excluding",
                     "untaxed", "discount", "unit", "line", "per item", "paid amount of tax"),
        labels=_labels(
            "grand total|total due|total amount due|amount due|balance due|total amount|total to pay|"
            "total payable|amount payable|total incl|total inc|total including|total ttc|montant ttc|"
            "net a payer|somme a payer|montant a payer|total a payer|totaal|te betalen|totaalbedrag|"
            "factuur totaal|factuurtotaal|totaal incl|gesamtbetrag|gesamtsumme|endbetrag|rechnungsbetrag|"
            "zu zahlen|zahlbetrag|summe|naleznosc ogolem|naleznosc|do zaplaty|razem do zaplaty|"
            "importe total|total a pagar|totale|totale fattura|importo totale|nett total|net total|"
            "total rounded|rounded total|total (rm)|total sales|total bill|total invoice|invoice total|"
            "total facture|total",
            "amount|total eur|total usd|razem|suma|betrag|bedrag|montant|importe|total paid|amount paid|"
            "paid|balance|net amount due",
            "cash|payment|tendered",
        ),
        negatives=_TAX_WORDS | _EXCLUSIVE | frozenset(
            "qty quantity quantities items item article articles pieces pcs count savings saving discount "
            "discounts rabatt korting remise descuento change rounding adj adjustment tip deposit weight "
            "points point units unit price per hours pages before previous credit credits "
            "number no invoices".split()
        ),
        positives=frozenset(
            "incl incl. inclusive including inc inkl inkl. inclus inclusief incluido ttc brutto gross "
            "with".split()
        ),
        kind="amount",
        last=True,
    ),
    Concept(
        "currency",
        triggers=("currency", "devise", "wahrung", "valuta", "waluta", "moneda", "iso 4217"),
        labels=_labels("currency|devise|wahrung|valuta|waluta|moneda"),
        kind="currency",
    ),
    Concept(
        "vendor",
        triggers=("company", "vendor", "seller", "supplier", "merchant", "shop", "store", "issuer", "issued by",
                  "sold by", "business", "restaurant", "from", "biller", "provider"),
        excluded_by=("customer", "buyer", "bill to", "ship to", "recipient", "client", "address", "email",
                     "phone", "vat", "tax id", "number", "registration"),
        labels=_labels(
            "vendor|seller|supplier|merchant|sold by|issued by|company|company name|business name|"
            "sprzedawca|verkaufer|lieferant|fournisseur|vendeur|leverancier|verkoper|proveedor|fornitore|"
            "store|shop|from",
        ),
        negatives=frozenset("address adresse no number id vat tax phone tel email".split()),
        kind="party",
    ),
    Concept(
        "customer",
        triggers=("customer", "buyer", "client", "bill to", "billed to", "recipient", "purchaser", "sold to"),
        excluded_by=("address", "email", "phone", "number", "id"),
        labels=_labels(
            "bill to|billed to|sold to|invoice to|customer|client|buyer|recipient|nabywca|kunde|klant|"
            "acheteur|destinataire|cliente|customer name|guest name",
        ),
        negatives=frozenset("no number id nr vat tax".split()),
        kind="party",
    ),
    Concept(
        "address",
        triggers=("address", "adresse", "adres", "anschrift", "direccion", "indirizzo", "location"),
        excluded_by=("email", "e-mail", "ip address", "web"),
        labels=_labels(
            "address|adresse|adres|anschrift|direccion|indirizzo|endereco|alamat|location",
        ),
        negatives=frozenset("email e-mail mail web ip".split()),
        kind="address",
    ),
    Concept(
        "email",
        triggers=("email", "e-mail", "mail"),
        labels=_labels("email|e-mail|mail|courriel"),
        kind="email",
    ),
    Concept(
        "phone",
        triggers=("phone", "telephone", "tel", "mobile", "fax"),
        labels=_labels("phone|telephone|tel|mobile|telefon|telefoon|telefono|tel no|phone no|contact no"),
        kind="phone",
    ),
    Concept(
        "order_number",
        triggers=("order number", "order no", "order id", "po number", "purchase order", "po"),
        labels=_labels("order number|order no|order id|order #|po number|po no|p.o. number|purchase order|"
                       "ordernummer|bestellnummer|numero de commande|commande n°|ordernr", "po|order"),
        negatives=frozenset("date datum".split()),
        kind="id",
    ),
    Concept(
        "iban",
        triggers=("iban", "bank account"),
        labels=_labels("iban|bank account|account number|kto-nr|rekeningnummer"),
        kind="id",
    ),
)

# Columns of a table (arrays of objects), found in header rows.
COLUMN_CONCEPTS: tuple[Concept, ...] = (
    Concept(
        "description",
        triggers=("description", "item", "name", "product", "article", "service", "designation", "title",
                  "details", "particulars"),
        excluded_by=("code", "number", "sku", "id"),
        labels=_labels(
            "description|item description|product description|item|items|product|products|article|artikel|"
            "service|services|designation|libelle|omschrijving|beschreibung|bezeichnung|artikelbezeichnung|"
            "leistung|nazwa|nazwa towaru|descripcion|descrizione|particulars|details|name|product title|"
            "produkt|prestation|code/desc",
        ),
        kind="text",
    ),
    Concept(
        "quantity",
        triggers=("quantity", "qty", "count", "units", "menge", "aantal", "quantite", "ilosc"),
        labels=_labels("quantity|qty|qty.|quantite|qte|menge|anzahl|aantal|ilosc|cantidad|quantita|units|"
                       "nombre|hoeveelheid|pcs|count|no. of units", "unit|hours|hrs"),
        kind="amount",
    ),
    Concept(
        "unit_price",
        triggers=("unit price", "price", "rate", "unit cost", "unit_price", "prix unitaire", "einzelpreis"),
        excluded_by=("total", "amount"),
        labels=_labels(
            "unit price|price|rate|unit cost|price per unit|prix unitaire|p.u.|pu|p.u. ht|prix|einzelpreis|"
            "preis|e-preis|stuckpreis|prijs|prijs per stuk|cena|cena jedn|precio|precio unitario|prezzo|"
            "vk-preis|unit rate|each",
        ),
        kind="amount",
    ),
    Concept(
        "amount",
        triggers=("amount", "total", "line total", "line amount", "subtotal", "sum", "montant", "betrag",
                  "bedrag", "price total"),
        labels=_labels(
            "amount|total|line total|line amount|total price|ext price|extended|montant|montant ht|"
            "montant ttc|betrag|gesamt|gesamtpreis|zeilenbetrag|bedrag|totaal|prijs incl. btw|wartosc|"
            "wartosc brutto|importe|importo|sum|value|net amount|amount (rm)|amt",
        ),
        kind="amount",
    ),
    Concept(
        "tax_rate",
        triggers=("tax rate", "vat rate", "tax %", "vat %", "tax", "vat", "btw", "tva"),
        labels=_labels("tax rate|vat rate|tax|vat|tva|btw|mwst|vat %|tax %|tax(%)|% tva|% btw|iva|gst"),
        kind="amount",
    ),
    Concept(
        "code",
        triggers=("sku", "code", "item code", "product code", "article number", "part number", "ref"),
        labels=_labels("sku|code|item code|product code|article no|art. no|art.-nr|artikelnummer|artikelnr|"
                       "ref|reference|part no|part number|item no|item #|pos", "no|#"),
        kind="id",
    ),
    Concept(
        "unit",
        triggers=("unit of measure", "uom", "unit"),
        excluded_by=("price", "cost", "rate"),
        labels=_labels("unit|uom|jm|einheit|unite|eenheid"),
        kind="text",
    ),
)


@dataclass(frozen=True)
class FieldLabels:
    """Everything the engine needs to look for one field."""

    labels: dict[str, float]
    pattern: re.Pattern[str]  # alternation of all labels, longest first
    negatives: frozenset[str] = frozenset()
    positives: frozenset[str] = frozenset()
    kind: str = "text"
    last: bool = False
    concept: str | None = None
    concepts: tuple[str, ...] = field(default=())


def _words_of(name: str) -> str:
    """``invoiceNumber`` / ``invoice_number`` / ``invoice-number`` → ``invoice number``."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", name)
    return " ".join(re.split(r"[\s_\-.]+", fold(spaced))).strip()


def _phrase_hits(text: str, phrase: str) -> bool:
    return re.search(r"(?<![a-z0-9])" + re.escape(phrase) + r"(?![a-z0-9])", text) is not None


def concepts_for(name: str, spec: dict[str, Any], concepts: tuple[Concept, ...] = CONCEPTS) -> list[Concept]:
    """The concepts a field means, best first: its name decides before its description."""
    own = _words_of(name)
    title = fold(str(spec.get("title") or ""))
    description = fold(str(spec.get("description") or ""))
    scored: list[tuple[int, int, Concept]] = []
    for order, concept in enumerate(concepts):
        everything = " ".join((own, title, description))
        if any(_phrase_hits(own + " " + title, phrase) for phrase in concept.excluded_by):
            continue
        if _phrase_hits(own, concept.name.replace("_", " ")) or any(_phrase_hits(own, t) for t in concept.triggers):
            scored.append((0, order, concept))
        elif any(_phrase_hits(title, t) for t in concept.triggers):
            scored.append((1, order, concept))
        elif any(_phrase_hits(description, t) for t in concept.triggers) and not any(
            _phrase_hits(everything, phrase) for phrase in concept.excluded_by
        ):
            scored.append((2, order, concept))
    scored.sort(key=lambda item: (item[0], item[1]))
    return [concept for _, _, concept in scored]


def _description_labels(description: str) -> list[str]:
    # "Invoice number or reference" → "invoice number", "reference": short chunks only.
    out = []
    for chunk in re.split(r"[,;:()/]|\bor\b|\bou\b|\boder\b|\bof\b|\be\.g\.|\bi\.e\.", fold(description)):
        words = chunk.split()
        if 1 <= len(words) <= 3:
            out.append(" ".join(words))
    return out


def compile_labels(labels: dict[str, float]) -> re.Pattern[str]:
    alternatives = []
    for label in sorted(labels, key=len, reverse=True):
        parts = [re.escape(p) for p in re.split(r"[\s_]+", label) if p]
        if not parts:
            continue
        body = r"[ \t.:_\-]*".join(parts)
        start = r"(?<![a-z0-9_])" if label[0].isalnum() else ""
        end = r"(?![a-z0-9_])" if label[-1].isalnum() else ""
        alternatives.append(start + body + end)
    return re.compile("|".join(alternatives) if alternatives else r"(?!x)x")


@functools.lru_cache(maxsize=512)
def _field_labels(name: str, title: str, description: str, columns: bool) -> FieldLabels:
    spec = {"title": title, "description": description}
    found = concepts_for(name, spec, COLUMN_CONCEPTS if columns else CONCEPTS)
    labels: dict[str, float] = {}
    own = _words_of(name)
    if own:
        labels[own] = 1.0
    if title:
        labels[fold(title).strip(" :")] = 1.0
    concept = found[0] if found else None
    if concept is not None:
        for label, weight in concept.labels.items():
            labels.setdefault(label, weight)
    for label in _description_labels(description):
        labels.setdefault(label, 0.7 if concept is None else 0.5)
    for label in list(labels):
        if len(label) < 2 and label != "#":
            del labels[label]
    return FieldLabels(
        labels=labels,
        pattern=compile_labels(labels),
        negatives=concept.negatives if concept else frozenset(),
        positives=concept.positives if concept else frozenset(),
        kind=concept.kind if concept else "text",
        last=concept.last if concept else False,
        concept=concept.name if concept else None,
        concepts=tuple(c.name for c in found),
    )


def field_labels(name: str, spec: dict[str, Any], *, column: bool = False) -> FieldLabels:
    """Labels, qualifiers and value kind for the field `name` described by `spec`."""
    return _field_labels(name, str(spec.get("title") or ""), str(spec.get("description") or ""), column)
