"""analysis.studies.letters"""
