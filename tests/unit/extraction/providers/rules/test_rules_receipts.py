"""Scanned receipts: the issuer's name and address from the header's layout,
totals and dates read through OCR misreads, and several OCR readings voted
on. Receipts here are made up (a generated image for the OCR path, text
lines marked as OCR output for the rules)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from system_requirements import needs_tesseract

from daemon.extraction.document import Document, Line, Page, Word, grid_text_line
from daemon.extraction.parsers import ParseOptions, ocr, parse
from daemon.extraction.parsers.scanned import ScannedDocument, readings_of
from daemon.extraction.providers.rules.engine import extract_rules
from daemon.extraction.providers.rules.values import repair_dates
from daemon.jobs import filetypes

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "company": {"type": "string", "description": "Name of the shop or company that issued the receipt"},
        "date": {"type": "string", "format": "date", "description": "Date of the purchase"},
        "address": {"type": "string", "description": "Postal address of the shop"},
        "total": {"type": "number", "description": "Total amount paid, tax included"},
    },
}


# Tesseract's readings are voted on (RapidOCR reads once).
TESSERACT = ParseOptions(ocr_engine="tesseract")


def scanned(*texts: str, conf: float = 0.9) -> Document:
    """A page of text lines as OCR would give them (cells split by runs of spaces)."""
    lines: list[Line] = []
    for row, text in enumerate(texts):
        line = grid_text_line(row, text)
        if line is not None:
            lines.append(Line(tuple(w._replace(conf=conf) for w in line.words)))
    width = max((line.x1 for line in lines), default=10.0)
    height = max((line.y1 for line in lines), default=10.0)
    return Document((Page(1, width, height, tuple(lines), ocr=True),))


def read(document: Document) -> dict[str, Any]:
    result, _ = extract_rules(document, SCHEMA)
    return result


HEADER = (
    "tan ah kow",  # a handwritten note above the print
    "KEDAI RUNCIT SRI WANGI SDN BHD",
    "(1023456-K)",
    "NO. 12, JALAN MAWAR 3,",
    "TAMAN BUNGA,",
    "43000 KAJANG,",
    "SELANGOR.",
    "TEL: 03-8736 1234   FAX: 03-8736 1235",
    "GST ID: 001234567890",
    "TAX INVOICE",
)


def test_the_issuer_and_its_address_come_from_the_header() -> None:
    result = read(scanned(*HEADER, "Date: 15/03/2018 12:30:45", "TOTAL        11.35"))
    assert result["company"] == "KEDAI RUNCIT SRI WANGI SDN BHD"
    assert result["address"] == "NO. 12, JALAN MAWAR 3, TAMAN BUNGA, 43000 KAJANG, SELANGOR."
    assert result["date"] == "2018-03-15"
    assert result["total"] == 11.35


def test_a_name_over_two_lines_and_a_brand_above_the_legal_name() -> None:
    assert read(scanned("BINA JAYA HARDWARE &", "ELECTRICAL", "NO.8, JALAN BESI 2,", "81100 JOHOR BAHRU",
                        "TEL: 07-555 1234"))["company"] == "BINA JAYA HARDWARE & ELECTRICAL"
    assert read(scanned("Orchidland", "Lemon Tree Kitchen Sdn Bhd", "(998877-A)", "Lot 5, Jalan Kenanga 1,",
                        "47100 Puchong, Selangor"))["company"] == "Lemon Tree Kitchen Sdn Bhd"
    # A stray mark above the name, a slogan with a web address.
    assert read(scanned("OBKS", "THANKS FOR SHOPPING AT mymart.com", "HENTIAN REHAT SELATAN",
                        "LOT R2, KM 45 LEBUHRAYA UTARA,", "84600 PAGOH, JOHOR"))["company"] == "HENTIAN REHAT SELATAN"


def test_a_misread_legal_suffix_is_mended() -> None:
    assert read(scanned("MAJU MAKMUR SON BHD", "NO. 1, JALAN SATU"))["company"] == "MAJU MAKMUR SDN BHD"
    # The spaces OCR lost around a name's brackets (not inside "S/B" or a number).
    assert read(scanned("MAJU HARDWARE(KLANG)SDN BHD", "NO. 1, JALAN SATU"))["company"] == \
        "MAJU HARDWARE (KLANG) SDN BHD"
    assert read(scanned("MR. D.I.Y.(M) SDN BHD", "NO. 1, JALAN SATU"))["company"] == "MR. D.I.Y. (M) SDN BHD"
    assert read(scanned("Maju Makmur Sdn Bed", "No. 1, Jalan Satu"))["company"] == "Maju Makmur Sdn Bhd"
    # Both words a letter off, where the pair ends the name; not elsewhere ("SIN" is a name).
    assert read(scanned("MAJU MAKMUR SIN BHU", "NO. 1, JALAN SATU"))["company"] == "MAJU MAKMUR SDN BHD"
    assert read(scanned("RESTORAN SIN BHU LEE SDN BHD", "NO. 1, JALAN SATU"))["company"] == \
        "RESTORAN SIN BHU LEE SDN BHD"


def test_a_speck_read_as_a_stop_after_a_word_inside_a_name_is_dropped() -> None:
    assert read(scanned("MAJU HARDWARE. ENTERPRISE (KLANG) SDN BHD", "NO. 1, JALAN SATU"))["company"] == \
        "MAJU HARDWARE ENTERPRISE (KLANG) SDN BHD"
    # Abbreviations and the name's own end keep theirs.
    assert read(scanned("ST. MARY BOOK CO. (M) SDN. BHD.", "NO. 1, JALAN SATU"))["company"] == \
        "ST. MARY BOOK CO. (M) SDN. BHD."


def test_the_registered_company_under_a_trade_name_with_a_weak_suffix_is_the_issuer() -> None:
    result = read(scanned("SIAM MILK TEA & CO.", "Dimiliki oleh MAJU F&B SDN. BHD.", "(1219716-T)",
                          "LOT NO.: 4F-27, 4TH FLOOR", "TEL: 03-7887 1234"))
    assert result["company"] == "Dimiliki oleh MAJU F&B SDN. BHD."
    # A name whose registered form is on its last line is one name.
    assert read(scanned("AIK MAJU HARDWARE", "ENTERPRISE (SETIA", "ALAM) SDN BHD", "NO. 17-G, JALAN SETIA 1,"))[
        "company"] == "AIK MAJU HARDWARE ENTERPRISE (SETIA ALAM) SDN BHD"


def test_a_name_read_without_a_single_space_gets_its_trade_words_back() -> None:
    assert read(scanned("BINTANGBOOKSTATIONERYSHOP", "NO. 31G, JALAN SETIA 1,"))["company"] == \
        "BINTANGBOOK STATIONERY SHOP"
    # A name read with spaces keeps the words it prints glued.
    assert read(scanned("RESTORAN MAJUBISTRO", "NO. 31G, JALAN SETIA 1,"))["company"] == "RESTORAN MAJUBISTRO"


def test_a_trade_or_legal_word_misread_in_the_name_is_mended() -> None:
    for misread, mended in [
        ("BINTANG HARDWAKE SDN BHD", "BINTANG HARDWARE SDN BHD"),  # one letter in seven or more
        ("BINTANG HARIWARL ENTERPRISE", "BINTANG HARDWARE ENTERPRISE"),  # two in eight or more
        ("Bintang Stationary Trsding", "Bintang Stationery Trading"),  # in the case it was read in
        ("BINTANG_MAJU RESTAUKANT", "BINTANG MAJU RESTAURANT"),  # an underscore for a space
    ]:
        assert read(scanned(misread, "NO. 1, JALAN SATU"))["company"] == mended, misread
    # A word a letter away is left as read when it is shorter than seven letters or in a
    # number, and two letters away when it is shorter than eight: as often another word.
    for kept in ("BINTANG BAKERS SDN BHD", "BINTANG KATCHUN SDN BHD", "BINTANG HARDWAKE2 SDN BHD",
                 "BINTANG 12_MAJU SDN BHD"):
        assert read(scanned(kept, "NO. 1, JALAN SATU"))["company"] == kept, kept


def test_the_spacing_of_sdn_bhd_is_mended() -> None:
    for misread in ("MAJU MAKMUR S DN BHD", "MAJU MAKMUR SDNBHD", "MAJU MAKMUR-SDN BHD"):
        assert read(scanned(misread, "NO. 1, JALAN SATU"))["company"] == "MAJU MAKMUR SDN BHD"
    # Its full stops are as printed.
    assert read(scanned("Maju Makmur Sdn. Bhd.", "No. 1, Jalan Satu"))["company"] == "Maju Makmur Sdn. Bhd."


def test_a_line_that_starts_with_a_legal_suffix_ends_the_name_above_it() -> None:
    result = read(scanned("SINAR BUKU", "CO. (M) SDN BHD", "(Co. No. 123456-W)", "NO 8, JALAN 7/1,",
                          "56000 KUALA LUMPUR"))
    assert result["company"] == "SINAR BUKU CO. (M) SDN BHD"
    # A name of its own above the legal name is a brand, not the start of the name.
    assert read(scanned("Sinar", "Sinar Buku Sdn Bhd", "No 8, Jalan 7/1,"))["company"] == "Sinar Buku Sdn Bhd"


def test_s_b_misread_as_5_b_before_the_company_number_is_the_legal_suffix() -> None:
    result = read(scanned("77 KEDAI MURAH 5/B (S12345-X)", "LOT 7, JALAN ANGSA,", "41150 KLANG, SELANGOR",
                          "GST ID. NO: 000181747712"))
    assert result["company"] == "77 KEDAI MURAH S/B"
    assert result["address"] == "LOT 7, JALAN ANGSA, 41150 KLANG, SELANGOR"
    # Inside a street address "5/B" stays what it is.
    assert read(scanned("KEDAI MURAH S/B", "NO. 5/B, JALAN ANGSA", "41150 KLANG"))["address"] == \
        "NO. 5/B, JALAN ANGSA 41150 KLANG"


def test_five_digits_after_letters_are_a_lot_number_not_the_postcode() -> None:
    result = read(scanned("SEGAR BORONG SDN BHD", "PT12345, SEKSYEN U9,", "40150 SHAH ALAM,", "SELANGOR.",
                          "GST Reg No : 001951645696"))
    assert result["address"] == "PT12345, SEKSYEN U9, 40150 SHAH ALAM, SELANGOR."


def test_a_cash_and_carry_is_a_trade_not_the_payment() -> None:
    result = read(scanned("MAJU CASH & CARRY", "NO.15, JLN TSJ 2,", "40000 SHAH ALAM, SEL.", "GST NO:001169362944",
                          "CASH"))
    assert result["company"] == "MAJU CASH & CARRY"
    assert result["address"] == "NO.15, JLN TSJ 2, 40000 SHAH ALAM, SEL."


def test_a_notice_to_the_customer_is_not_the_name() -> None:
    # The end of the previous receipt's footer, printed above this one's header.
    result = read(scanned("Goods Sold Are Not Returnable.", "Maju Borong", "No. 3, Jalan Satu,", "40150 Shah Alam",
                          "GST Reg No : 001951645696"))
    assert result["company"] == "Maju Borong"


def test_a_logo_much_taller_than_the_text_is_not_the_name() -> None:
    def line(text: str, top: float, height: float, conf: float) -> Line:
        return Line((Word(text, 10.0, top, 10.0 + 10 * len(text), top + height, conf),))

    logo = line("Xo inl", 0.0, 120.0, 0.9)  # read with some confidence, six times the text's height
    rows = [line(text, 140.0 + 30 * index, 20.0, 0.95) for index, text in
            enumerate(("B & SONS RESTAURANT", "(001610235 P)", "NO.12, JALAN SS4C/5,", "47301 PETALING JAYA",
                       "TEL : 012-2060 778"))]
    page = Page(1, 400.0, 400.0, (logo, *rows), ocr=True)
    assert read(Document((page,)))["company"] == "B & SONS RESTAURANT"


def test_a_company_number_after_the_registered_form_is_cut_however_misread() -> None:
    assert read(scanned("CAHAYA MANIS S/B 273500-U (KLG)", "NO. 1, JALAN SATU"))["company"] == "CAHAYA MANIS S/B"
    assert read(scanned("SINAR BULAN SDN BHD B0ZTZ5-U", "NO. 1, JALAN SATU"))["company"] == "SINAR BULAN SDN BHD"
    # A number after a trade, not a registered form, may be part of the name.
    assert read(scanned("TIGA ENTERPRISE 333", "NO. 1, JALAN SATU"))["company"] == "TIGA ENTERPRISE 333"


def test_a_label_word_in_the_possessive_is_not_a_label() -> None:
    result = read(scanned("SINAR BULAN SDN BHD", "NO. 1, JALAN SATU,", "50200 KUALA LUMPUR", "TOTAL        10.50",
                          "Goods may be exchanged within 14 days subject to",
                          "the Company's approval. Vouchers must be redeemed"))
    assert result["company"] == "SINAR BULAN SDN BHD"


def test_the_address_skips_the_date_and_the_registration_number_under_the_name() -> None:
    result = read(scanned("NASI DAUN PISANG SDN BHD", "05 Mar 2018 18:24", "(867000-U)",
                          "12, Jalan Tampoi 7/4,Kawasan Perindustrian", "Tampoi,81200 Johor Bahru,Johor",
                          "TAX INVOICE"))
    assert result["company"] == "NASI DAUN PISANG SDN BHD"
    assert result["address"] == "12, Jalan Tampoi 7/4,Kawasan Perindustrian Tampoi,81200 Johor Bahru,Johor"


def test_a_postcode_glued_to_its_town_and_a_stop_read_twice_or_beside_a_comma_are_mended() -> None:
    result = read(scanned("SINAR BULAN SDN BHD", "No.2, Jalan Mawar 19/9,", "43200Cheras, Selangor..",
                          "Tel: 03-9075 1234"))
    assert result["address"] == "No.2, Jalan Mawar 19/9, 43200 Cheras, Selangor."
    result = read(scanned("SINAR BULAN SDN BHD", "LOT R1, LEBUHRAYA UTARA SELATAN.,", "84600,PAGOH,JOHOR",
                          "Tel: 06-975 1234"))
    assert result["address"] == "LOT R1, LEBUHRAYA UTARA SELATAN, 84600,PAGOH,JOHOR"


def test_an_accent_the_recogniser_put_on_a_page_written_without_them_is_dropped() -> None:
    header = ("SINAR BULAN SDN BHD", "NO. 31G, JALAN SETIA INDAH,", "40170 SETIA \u00c1LAM", "TEL: 03-3359 1234")
    body = ("TAX INVOICE", "Cashier: AMINAH", "NASI LEMAK BUNGKUS     2.50", "TEH TARIK KURANG MANIS     1.80",
            "TOTAL     4.30", "CASH     10.00", "CHANGE     5.70", "THANK YOU PLEASE COME AGAIN")
    assert read(scanned(*header, *body))["address"] == "NO. 31G, JALAN SETIA INDAH, 40170 SETIA ALAM"
    # A page written with accents keeps them.
    french = read(scanned("CAF\u00c9 DE LA GARE", "12 RUE DE L'\u00c9GLISE", "75001 PARIS", "T\u00c9L 01 42 00 00 00",
                          "Qt\u00e9  D\u00e9signation  Montant", "2  Caf\u00e9 cr\u00e8me  7,00", "TOTAL TTC  7,00"))
    assert french["company"] == "CAF\u00c9 DE LA GARE"


def test_the_country_ends_the_address() -> None:
    result = read(scanned("SINAR BUKU SDN BHD", "No 8, Jalan 7/1, Desa Tun Razak", "56000 Kuala Lumpur, Malaysia",
                          "MIDVALE MALL", "Tel : 03-9201 1234"))
    assert result["address"] == "No 8, Jalan 7/1, Desa Tun Razak 56000 Kuala Lumpur, Malaysia"


def test_the_branch_and_a_second_postcode_under_the_postcode_line_are_the_address() -> None:
    result = read(scanned("77 KEDAI MURAH S/B (512345-X)", "LOT 7, JALAN ANGSA,", "41150 KLANG, SELANGOR",
                          "1234-TAMAN MELATI", "GST ID. NO : 000181747712"))
    assert result["address"] == "LOT 7, JALAN ANGSA, 41150 KLANG, SELANGOR 1234-TAMAN MELATI"
    result = read(scanned("SINAR BULAN SDN BHD", "95, Beach Road, 10300 Penang,", "10400 Penang.",
                          "Tel:04-262 1234"))
    assert result["address"] == "95, Beach Road, 10300 Penang, 10400 Penang."


def test_the_address_is_the_street_lines_above_its_postcode() -> None:
    # A branch with a number under the name, a site code, then the address.
    result = read(scanned("MAJU NIAGA SDN BHD (524463-X)", "Kedaimart@KP2", "GST Reg No 001532760064",
                          "Lot No2, Jalan Utarid U5/13,", "Seksyen U5, 40150 Shah Alam,", "Tel: (+603)7831 0109"))
    assert result["address"] == "Lot No2, Jalan Utarid U5/13, Seksyen U5, 40150 Shah Alam,"
    result = read(scanned("MAJU MINYAK SDN BHD", "Company No 20965-", "Site: 1046", "176 JLN SUNGEI BESI",
                          "57100 KUALA LUMPUR", "Telephone: 03-9221345"))
    assert result["address"] == "176 JLN SUNGEI BESI 57100 KUALA LUMPUR"
    # A mall's name right above the address is not part of it.
    result = read(scanned("MAJU HANDEL SDN BHD", "(1074617K)", "MAJU Cheras", "No 2A Jalan Cochrane",
                          "Taman Maluri", "55100 KUALA LUMPUR", "GST No.: 000115154944"))
    assert result["address"] == "No 2A Jalan Cochrane Taman Maluri 55100 KUALA LUMPUR"


def test_more_names_under_the_name_and_a_postcode_after_a_comma() -> None:
    result = read(scanned("Gerbang Maju Restaurants Sdn Bhd", "(65351-M)", "formerly known as",
                          "Golden Maju Restaurants Sdn Bhd", "Licensee of Maju Burger", "Level 6, Bangunan TH, Uptown3",
                          "No.3, Jalan SS21/39,47400 Petaling Jaya", "Selangor", "(GST ID No: 000504664064)"))
    assert result["address"] == "Level 6, Bangunan TH, Uptown3 No.3, Jalan SS21/39,47400 Petaling Jaya Selangor"


def test_a_house_number_after_no_starts_the_address() -> None:
    result = read(scanned("MAJU Hardware Centre (M) Sdn. Bhd.", "Co. Reg. No.: 795225-A",
                          "No: G3, Blk G, Jln PJU 1A/3,", "Ara Damansara, 47301",
                          "Petaling Jaya, Selangor Darul Ehsan.", "TEL:03-78326929"))
    # The postcode ends its line: the town and the state come next, in more words.
    assert result["address"] == \
        "No: G3, Blk G, Jln PJU 1A/3, Ara Damansara, 47301 Petaling Jaya, Selangor Darul Ehsan."
    # A document's number after "No:" is not.
    assert "address" not in read(scanned("MAJU Hardware Sdn. Bhd.", "No: 00123456", "TEL:03-78326929"))


def test_an_address_printed_with_wide_line_spacing_holds_together() -> None:
    texts = ("MAJU STATIONERY SDN BHD", "(Co. No.: 123769-W)", "F-G-01 JALAN SS 6/5B", "Dataran Glomac, Kelana Jaya",
             "47301 Petaling Jaya, Selangor", "03-7880 5750")
    # Lines 18 high, 40 apart: the gap between them is 1.2 times their height.
    page = Page(1, 600.0, 400.0, tuple(Line((Word(text, 10.0, 40.0 * row, 300.0, 40.0 * row + 18, 0.95),))
                                       for row, text in enumerate(texts)), ocr=True)
    assert read(Document((page,)))["address"] == \
        "F-G-01 JALAN SS 6/5B Dataran Glomac, Kelana Jaya 47301 Petaling Jaya, Selangor"


def test_a_capital_i_inside_a_lower_case_word_is_a_misread_l() -> None:
    result = read(scanned("Taste Of The WorId Sdn Bhd", "No: G3, BIk G, JIn PJU 1A/3,", "47301 Petaling Jaya",
                          "Tel: 03-7832 6929"))
    assert result["company"] == "Taste Of The World Sdn Bhd"
    assert result["address"] == "No: G3, Blk G, Jln PJU 1A/3, 47301 Petaling Jaya"
    # Capitals stay capitals.
    assert read(scanned("AIK HUAT SDN BHD", "NO. 1, JALAN SATU"))["company"] == "AIK HUAT SDN BHD"


def test_an_address_word_read_with_i_for_l_is_mended() -> None:
    result = read(scanned("MAJU Petrol Subang", "Jaian Lapangan Terbang Subang", "47200 Subang", "Selangor",
                          "CO. REG. NO: 000948487-V"))
    assert result["address"] == "Jalan Lapangan Terbang Subang 47200 Subang Selangor"


def test_an_address_word_read_with_digits_for_its_letters_is_mended() -> None:
    # The foot of the L read as a stop, or the L as a 1 and the O as a zero.
    for misread in ("10T", "1.OT"):
        result = read(scanned("MAJU HARDWARE SDN BHD", f"{misread} 12-A, JALAN SATU,", "41150 KLANG",
                              "TEL: 03-3359 1234"))
        assert result["address"] == "LOT 12-A, JALAN SATU, 41150 KLANG"
    # A number that is not an address word stays a number, and initials stay initials.
    assert read(scanned("MAJU HARDWARE SDN BHD", "NO. 105, JALAN S.T. SAMY,", "41150 KLANG"))["address"] == \
        "NO. 105, JALAN S.T. SAMY, 41150 KLANG"


def test_a_stop_after_a_house_number_with_its_letter_is_a_comma() -> None:
    result = read(scanned("MAJU HARDWARE SDN BHD", "LOT 12-A & 12-B. JALAN SATU,", "41150 KLANG"))
    assert result["address"] == "LOT 12-A & 12-B, JALAN SATU, 41150 KLANG"
    result = read(scanned("MAJU HARDWARE SDN BHD", "NO 31G. JALAN SATU,", "41150 KLANG"))
    assert result["address"] == "NO 31G, JALAN SATU, 41150 KLANG"


def test_a_misread_character_is_read_as_the_kind_of_token_it_is_in() -> None:
    # A digit inside a word is the letter it looks like, a letter O among digits a zero,
    # a floor's ordinal ends in D.
    result = read(scanned("MAJU HARDWARE SDN BHD", "3R0 FLOOR, NO 2O4, JALAN 8UNGA 5ARI,", "41150 KLANG",
                          "TEL: 03-3359 1234"))
    assert result["address"] == "3RD FLOOR, NO 204, JALAN BUNGA SARI, 41150 KLANG"
    # In a word in lower case, the letter is in lower case but where it starts the word.
    result = read(scanned("Maju Hardware Sdn Bhd", "No 7, Jalan 8unga, Taman Se5uria,", "41150 Klang"))
    assert result["address"] == "No 7, Jalan Bunga, Taman Sesuria, 41150 Klang"
    # A digit at the end of a word, or in a code of a few letters, is printed so, and so
    # is a number glued between two words.
    result = read(scanned("MAJU HARDWARE SDN BHD", "Lot 3, Uptown5, Jalan USJ8A,", "47600 Subang Jaya"))
    assert result["address"] == "Lot 3, Uptown5, Jalan USJ8A, 47600 Subang Jaya"
    result = read(scanned("Maju Hardware Sdn Bhd", "Lot8Jalan Mawar,", "47600 Subang Jaya"))
    assert result["address"] == "Lot8Jalan Mawar, 47600 Subang Jaya"


def test_a_street_word_glued_to_the_name_after_it_is_set_off() -> None:
    result = read(scanned("MAJU HARDWARE SDN BHD", "NO 7, JALANKENARI 5, TAMANBUNGA RAYA,", "41150 KLANG"))
    assert result["address"] == "NO 7, JALAN KENARI 5, TAMAN BUNGA RAYA, 41150 KLANG"
    # A word that starts with one is not split.
    result = read(scanned("MAJU HARDWARE SDN BHD", "NO 7, JALANAN KENARI,", "41150 KLANG"))
    assert result["address"] == "NO 7, JALANAN KENARI, 41150 KLANG"


def test_a_place_word_misread_by_a_mark_or_a_confused_letter_is_mended() -> None:
    result = read(scanned("MAJU HARDWARE SDN BHD", "NO.12,JA:AN MAWAR 5, TANAN BUNGA,", "41150 KLANG SE_ANGOR",
                          "TEL: 03-3359 1234"))
    assert result["address"] == "NO.12,JALAN MAWAR 5, TAMAN BUNGA, 41150 KLANG SELANGOR"
    # Another letter may be printed so: it stays.
    result = read(scanned("MAJU HARDWARE SDN BHD", "NO.12, KAWASAN PARINDUSTRIAN MAJU,", "41150 KLANG"))
    assert result["address"] == "NO.12, KAWASAN PARINDUSTRIAN MAJU, 41150 KLANG"


def test_a_line_with_a_section_abbreviated_sek_is_the_address_not_the_name() -> None:
    # The name is a logo OCR did not read: the address line is not taken for it.
    result = read(scanned("Ref No: 0 00612345678901", "Pt12345 Sek U2, Shah Alam", "GST Reg No : 001951612345",
                          "05/03/2018 11:43am", "MAJU DISHWASH 1L", "2 x 11.50   23.00"))
    assert result["address"] == "Pt12345 Sek U2, Shah Alam"
    assert result.get("company") != "Pt12345 Sek U2, Shah Alam"


def test_a_branch_with_a_bracketed_code_above_the_address_is_not_part_of_it() -> None:
    result = read(scanned("MAJU EKSKLUSIF SDN BHD (123456-D)", "Arrival Hall (K3)", "12 Jalan Laut", "Tanjung Bunga",
                          "80300 Johor Bahru", "Tel: 07-2212 888"))
    assert result["address"] == "12 Jalan Laut Tanjung Bunga 80300 Johor Bahru"


def test_a_colon_ending_an_address_line_after_a_word_is_dropped() -> None:
    result = read(scanned("MAJU HARDWARE SDN BHD", "NO. 5, JALAN BESAR, 45600 BATANG KALI:", "SELANGOR DARUL EHSAN",
                          "TEL: 03-3359 1234"))
    assert result["address"] == "NO. 5, JALAN BESAR, 45600 BATANG KALI SELANGOR DARUL EHSAN"


def test_a_line_further_below_the_address_than_its_lines_are_apart_is_not_part_of_it() -> None:
    def line(text: str, top: float) -> Line:
        return Line((Word(text, 10.0, top, 300.0, top + 30.0, 0.95),))

    rows = [("MAJU Petrol Subang", 0.0), ("Jalan Lapangan Terbang", 40.0), ("47200 Subang", 80.0),
            ("Selangor", 120.0), ("Maju Servport", 190.0), ("CO. REG. NO: 000948487-V", 230.0)]
    page = Page(1, 400.0, 400.0, tuple(line(text, top) for text, top in rows), ocr=True)
    assert read(Document((page,)))["address"] == "Jalan Lapangan Terbang 47200 Subang Selangor"


def test_the_town_printed_with_the_phone_ends_the_address_before_the_phone() -> None:
    result = read(scanned("MAJU CAKE HOUSE SDN BHD", "No.1, Jalan Permas 10/5, Bandar Baru Permas Jaya",
                          "81750 Johor Bahru, Johor. Te1 No.: 07-387 3322", "www.majucake.com"))
    assert result["address"] == "No.1, Jalan Permas 10/5, Bandar Baru Permas Jaya 81750 Johor Bahru, Johor."


def test_a_full_stop_between_the_parts_of_an_address_is_its_comma() -> None:
    result = read(scanned("Rasa Dunia Sdn Bhd", "965857-A", "Lot 38. 39 Boulevard. Jalan Kenari 5.",
                          "47170 Puchong. Selangor.", "TEL: 03 - 8079 0255"))
    # Abbreviations keep their stops, and so does the end.
    assert result["address"] == "Lot 38, 39 Boulevard, Jalan Kenari 5, 47170 Puchong, Selangor."
    assert read(scanned("Rasa Dunia Sdn Bhd", "LOT P.T. 2811, JLN. ANGSA,", "41150 KLANG"))["address"] == \
        "LOT P.T. 2811, JLN. ANGSA, 41150 KLANG"


def test_a_label_that_names_a_number_before_the_date_does_not_refuse_the_date() -> None:
    lines = ("KEDAI MURAH SDN BHD", "NO. 1, JALAN SATU", "Order No. 1000219 11/03/2018 06:20 PM", "TOTAL     9.00")
    assert read(scanned(*lines))["date"] == "2018-03-11"
    # A label that names the date itself still refuses it.
    result = read(scanned("KEDAI MURAH SDN BHD", "Due in 30 days 11/04/2018", "Date: 11/03/2018"))
    assert result["date"] == "2018-03-11"


def test_a_company_number_label_and_a_customer_address_field_are_not_the_issuer() -> None:
    result = read(scanned("SETIA HOME HARDWARE SDN BHD", "NO. 3, JALAN SETIA 1,", "40170 SHAH ALAM",
                          "Company Reg No. 1234567-X", "Address", "GST No."))
    assert result["company"] == "SETIA HOME HARDWARE SDN BHD"
    assert result["address"] == "NO. 3, JALAN SETIA 1, 40170 SHAH ALAM"


def test_a_name_printed_with_its_company_number_is_the_name() -> None:
    result = read(scanned("PA", "88 KEDAI MURAH S/B (512345-X)", "LOT 7, JALAN ANGSA,", "41150 KLANG, SELANGOR",
                          "GST ID. NO: 000181747712"))
    assert result["company"] == "88 KEDAI MURAH S/B"
    assert result["address"] == "LOT 7, JALAN ANGSA, 41150 KLANG, SELANGOR"
    # Without a legal suffix before it, such a line is still the registration number.
    assert read(scanned("KEDAI MURAH", "JM0512345-X", "LOT 7, JALAN ANGSA,"))["company"] == "KEDAI MURAH"


def test_a_code_after_a_location_label_is_not_the_address() -> None:
    result = read(scanned("INDAH GIFT & HOME DECO", "27,JALAN DEDAP 13,", "TAMAN JOHOR JAYA,",
                          "81100 JOHOR BAHRU,JOHOR.", "Tel:07-3507405", "RECEIPT", "Cashier: CN",
                          "Location/SP: 05 /0531"))
    assert result["address"] == "27,JALAN DEDAP 13, TAMAN JOHOR JAYA, 81100 JOHOR BAHRU,JOHOR."


def test_the_rounded_total_wins_when_the_rounding_explains_it() -> None:
    document = scanned("TOTAL              RM 33.92", "ROUNDING ADJUSTMENT  -RM 0.02",
                       "TOTAL ROUNDED      RH 33.90", "CASH               RM 50.00")
    assert read(document)["total"] == 33.90


def test_a_tax_summary_row_and_a_percentage_are_not_the_total() -> None:
    document = scanned("SUB-TOTAL (EX)     26.00", "TOTAL TAX           1.56", "TOTAL     typ      27.55",
                       "GSTSUMMARY", "SR    6.00%   26.00   1.56", "TOTAL:             26.00   1.56")
    assert read(document)["total"] == 27.55


def test_a_misread_currency_between_label_and_amount_and_a_lost_decimal_point() -> None:
    assert read(scanned("ITEM  2  10.50", "Total   Ri   =86.00", "Visa  RM  86.00"))["total"] == 86.00
    document = scanned("NASI LEMAK   4.50", "TEH TARIK   2.50", "KUIH   3.00", "GRAND TOTAL   1000")
    assert read(document)["total"] == 10.00


def askew(*lines: tuple[tuple[str, float, float], ...]) -> Document:
    """A scanned page of lines of (text, x, y) cells, each cell 20 high and 10 wide a character."""
    built = [Line(tuple(Word(text, x, y, x + 10 * len(text), y + 20, 0.9) for text, x, y in cells))
             for cells in lines]
    return Document((Page(1, 400, 200, tuple(built), ocr=True),))


def test_an_amount_printed_lower_than_its_label_is_read_from_the_next_line() -> None:
    # A receipt scanned askew: OCR splits each "label ...... amount" in two lines.
    lines = ((("Total", 0, 0),), (("5.00", 300, 12),), (("Cash", 0, 40),), (("10.00", 300, 52),),
             (("Change", 0, 80),), (("5.00", 300, 92),))
    assert read(askew(*lines))["total"] == 5.00
    # Not a line wholly below the label, nor one that says something besides its amount.
    assert "total" not in read(askew((("Total", 0, 0),), (("5.00", 300, 22),)))
    assert "total" not in read(askew((("Total", 0, 0),), (("Coffee", 100, 12), ("5.00", 300, 12))))


def test_due_alone_labels_the_total_when_nothing_stronger_does() -> None:
    assert read(scanned("SCONE   1   7.50", "Due          7.50", "Change      12.50"))["total"] == 7.50
    assert read(scanned("Total  RM 9.00", "Due date  12/03/2018", "Due in 30 days"))["total"] == 9.00


def test_a_total_the_arithmetic_confirms_is_no_surer_than_the_ocr_that_read_it() -> None:
    document = scanned("SUBTOTAL  20.00", "TAX  1.20", "TOTAL  21.20", "CASH  50.00", "CHANGE  28.80", conf=0.8)
    result, fields = extract_rules(document, SCHEMA)
    assert result["total"] == 21.20
    assert fields["/total"]["confidence"] == 0.8


def test_ocr_dates_are_repaired_inside_date_shaped_tokens_only() -> None:
    assert repair_dates("Date: 2O/O3/2Ol8") == "Date: 20/03/2018"
    assert repair_dates("12.01-19 21:13") == "12.01.19 21:13"
    assert repair_dates("SS21/1A, DAMANSARA") == "SS21/1A, DAMANSARA"
    # An item code is not a date, the stamped date with its time is.
    document = scanned("ITEM HCO3-7 - 15", "CHOPPING BOARD   1 X 18.00", "12-01-19 21:13 SHOP 2 R000027830")
    assert read(document)["date"] == "2019-01-12"


def test_readings_vote_field_by_field() -> None:
    def reading(total: str, date: str, conf: float = 0.9) -> Document:
        return scanned("PERNIAGAAN MAJU JAYA", "NO. 7, JALAN PASAR,", f"Date: {date}", f"TOTAL   {total}",
                       conf=conf)

    first = reading("112.46", "12/02/2018")
    document = ScannedDocument(first.pages, (reading("112.45", "12/02/2018"), reading("112.45", "12/08/2018")))
    assert readings_of(document)[0].pages == first.pages
    result, fields = extract_rules(document, SCHEMA)
    assert result["total"] == 112.45  # two readings of three
    assert result["date"] == "2018-02-12"
    assert fields["/total"]["text"] == "112.45"
    # Two readings that disagree: the surer one.
    unsure = reading("99.99", "12/02/2018", conf=0.3)
    assert extract_rules(ScannedDocument(unsure.pages, (reading("10.00", "12/02/2018"),)), SCHEMA)[0]["total"] == 10.0


def test_a_plain_document_is_its_only_reading() -> None:
    document = Document((Page(1, 10, 10, (Line((Word("Total 1.00", 0, 0, 5, 1),)),)),))
    assert readings_of(document) == (document,)


def write_receipt_jpeg(path: Path) -> Path:
    """A till receipt printed in a monospace font and scanned at 150 dpi."""
    import pypdfium2 as pdfium
    from reportlab.lib.units import mm
    from reportlab.pdfgen import canvas

    lines = [*HEADER[1:], "Date: 15/03/2018 12:30:45", "", "NASI LEMAK        2     9.00",
             "TEH TARIK         1     2.33", "SUB TOTAL              11.33", "ROUNDING ADJ            0.02",
             "TOTAL ROUNDED          11.35", "CASH                   20.00", "CHANGE                  8.65",
             "", "THANK YOU"]
    pdf = path.with_suffix(".pdf")
    width, height = 80 * mm, (len(lines) + 4) * 12
    c = canvas.Canvas(str(pdf), pagesize=(width, height))
    c.setFont("Courier-Bold", 8.5)
    y = height - 24
    for text in lines:
        c.drawCentredString(width / 2, y, text)
        y -= 12
    c.showPage()
    c.save()
    document = pdfium.PdfDocument(str(pdf))
    try:
        page = document[0]
        page.render(scale=150 / 72).to_pil().convert("RGB").save(path, format="JPEG", quality=85, dpi=(150, 150))
        page.close()
    finally:
        document.close()
    return path


@needs_tesseract
def test_a_clean_scan_is_read_once(tmp_path: Path) -> None:
    document = parse(write_receipt_jpeg(tmp_path / "receipt.jpg"), filetypes.JPEG, TESSERACT)
    assert isinstance(document, ScannedDocument)
    assert document.readings == ()
    assert read(document)["total"] == 11.35


@needs_tesseract
def test_an_unsure_scan_is_read_three_times_and_its_fields_found(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # A generated image reads too well to be unsure: every reading counts as unsure here.
    monkeypatch.setattr(ocr, "_SURE_ENOUGH", 1.01)
    document = parse(write_receipt_jpeg(tmp_path / "receipt.jpg"), filetypes.JPEG, TESSERACT)
    assert isinstance(document, ScannedDocument)
    assert len(document.readings) == 2
    assert all(r.page_count == 1 and r.pages[0].ocr for r in document.readings)
    # Every reading is in the image's own pixels.
    assert all(w.x1 <= r.pages[0].width + 1 for r in document.readings for line in r.pages[0].lines
               for w in line.words)
    result, fields = extract_rules(document, SCHEMA)
    assert result == {
        "company": "KEDAI RUNCIT SRI WANGI SDN BHD",
        "date": "2018-03-15",
        "address": "NO. 12, JALAN MAWAR 3, TAMAN BUNGA, 43000 KAJANG, SELANGOR.",
        "total": 11.35,
    }
    assert 0 < fields["/total"]["confidence"] <= 0.99
