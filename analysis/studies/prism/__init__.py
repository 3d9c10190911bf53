"""analysis.studies.prism"""
