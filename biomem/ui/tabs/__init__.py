"""The page's tabs and panels, one module each (biomem.ui.layout puts them on the page)."""
